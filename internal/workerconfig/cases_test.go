package workerconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// caseFile is one data-driven case under testdata/<engine>/.
type caseFile struct {
	About      string          `json:"about"`
	Options    caseOptions     `json:"options"`
	Config     json.RawMessage `json:"config"`
	ConfigText *string         `json:"config_text"`
	// Want is a partial descriptor: every key given must match exactly
	// (objects recursively, lists whole).
	Want        map[string]any `json:"want"`
	WantRefusal []string       `json:"want_refusal"` // substrings of Refusal
	WantWarning []string       `json:"want_warning"` // substrings of the joined warnings
	WantError   []string       `json:"want_error"`   // substrings of the error
	WantIs      []string       `json:"want_is"`      // sentinel names the error matches
}

type caseOptions struct {
	DPStart       *int                `json:"dp_start"`
	AdvertiseHost string              `json:"advertise_host"`
	Resolve       map[string][]string `json:"resolve"`
	Files         map[string]string   `json:"files"`
	AllowLoopback bool                `json:"allow_loopback"`
}

var sentinels = map[string]error{
	"ErrInvalidConfig":      ErrInvalidConfig,
	"ErrUndialableHost":     ErrUndialableHost,
	"ErrInvalidPort":        ErrInvalidPort,
	"ErrUnsupportedOption":  ErrUnsupportedOption,
	"ErrInventoryGuarantee": ErrInventoryGuarantee,
	"ErrInvalidOwnerID":     ErrInvalidOwnerID,
	"ErrBlockSizeMismatch":  ErrBlockSizeMismatch,
	"ErrNoEvents":           ErrNoEvents,
}

// baseResolve is the name service every case sees unless it overrides a name.
var baseResolve = map[string][]string{
	"localhost":            {"127.0.0.1", "::1"},
	"worker-0":             {"127.0.1.1"}, // a Debian-style hostname entry
	"node-7.cluster.local": {"10.1.2.7"},
	"node-8.cluster.local": {"10.1.2.8", "fd00::8"},
	"mapped.example":       {"::ffff:127.0.0.1"},
}

func (c caseOptions) options() Options {
	opt := Options{DPStart: c.DPStart, AdvertiseHost: c.AdvertiseHost, AllowLoopback: c.AllowLoopback}
	table := make(map[string][]string, len(baseResolve)+len(c.Resolve))
	for k, v := range baseResolve {
		table[k] = v
	}
	for k, v := range c.Resolve {
		table[k] = v
	}
	opt.Resolve = func(host string) ([]string, error) {
		if addrs, ok := table[host]; ok {
			return addrs, nil
		}
		return nil, fmt.Errorf("lookup %s: no such host", host)
	}
	opt.ReadFile = func(path string) ([]byte, error) {
		if s, ok := c.Files[path]; ok {
			return []byte(s), nil
		}
		return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
	}
	return opt
}

func TestCases(t *testing.T) {
	for _, engine := range []Engine{EngineSGLang, EngineVLLM} {
		files, err := filepath.Glob(filepath.Join("testdata", string(engine), "*.json"))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) < 10 {
			t.Fatalf("%s: only %d case files", engine, len(files))
		}
		for _, file := range files {
			name := string(engine) + "/" + strings.TrimSuffix(filepath.Base(file), ".json")
			t.Run(name, func(t *testing.T) { runCase(t, engine, file) })
		}
	}
}

func runCase(t *testing.T, engine Engine, file string) {
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var c caseFile
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("case file: %v", err)
	}
	if c.About == "" {
		t.Fatal("case file: about is empty")
	}
	config := []byte(c.Config)
	if c.ConfigText != nil {
		config = []byte(*c.ConfigText)
	}
	d, err := Build(engine, config, c.Options.options())
	if len(c.WantError) > 0 || len(c.WantIs) > 0 {
		if err == nil {
			got, _ := json.MarshalIndent(d, "", "  ")
			t.Fatalf("want error %q, got descriptor\n%s", c.WantError, got)
		}
		for _, s := range c.WantError {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not contain %q", err, s)
			}
		}
		for _, name := range append([]string{"ErrInvalidConfig"}, c.WantIs...) {
			sentinel, ok := sentinels[name]
			if !ok {
				t.Fatalf("case file: unknown sentinel %q", name)
			}
			if !errors.Is(err, sentinel) {
				t.Errorf("error %q does not match %s", err, name)
			}
		}
		return
	}
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if c.Want == nil {
		t.Fatal("case file: neither want nor want_error")
	}
	got := toMap(t, d)
	if diffs := partialDiff("", c.Want, got); len(diffs) > 0 {
		js, _ := json.MarshalIndent(d, "", "  ")
		t.Errorf("descriptor differs:\n  %s\ngot:\n%s", strings.Join(diffs, "\n  "), js)
	}
	for _, s := range c.WantRefusal {
		if !strings.Contains(d.Refusal, s) {
			t.Errorf("refusal %q does not contain %q", d.Refusal, s)
		}
	}
	warnings := strings.Join(d.Warnings, "\n")
	for _, s := range c.WantWarning {
		if !strings.Contains(warnings, s) {
			t.Errorf("warnings %q do not contain %q", warnings, s)
		}
	}
	checkRoundTrip(t, d)
	again, err := Build(engine, config, c.Options.options())
	if err != nil || !reflect.DeepEqual(d, again) {
		t.Errorf("second build differs (err %v): descriptors must be deterministic", err)
	}
}

// checkRoundTrip: a descriptor survives JSON and still validates, as the
// agent may persist or relay it.
func checkRoundTrip(t *testing.T, d *Descriptor) {
	t.Helper()
	js, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var back Descriptor
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if err := back.Validate(); err != nil {
		t.Errorf("round-tripped descriptor fails validation: %v", err)
	}
}

func toMap(t *testing.T, d *Descriptor) map[string]any {
	t.Helper()
	js, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func partialDiff(path string, want, got any) []string {
	wm, ok := want.(map[string]any)
	if !ok {
		if !reflect.DeepEqual(want, got) {
			w, _ := json.Marshal(want)
			g, _ := json.Marshal(got)
			return []string{fmt.Sprintf("%s: want %s, got %s", path, w, g)}
		}
		return nil
	}
	gm, ok := got.(map[string]any)
	if !ok {
		return []string{fmt.Sprintf("%s: want an object, got %v", path, got)}
	}
	keys := make([]string, 0, len(wm))
	for k := range wm {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var diffs []string
	for _, k := range keys {
		g, present := gm[k]
		if !present {
			diffs = append(diffs, fmt.Sprintf("%s.%s: missing", path, k))
			continue
		}
		diffs = append(diffs, partialDiff(path+"."+k, wm[k], g)...)
	}
	return diffs
}
