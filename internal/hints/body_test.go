package hints

import (
	"bytes"
	"encoding/json"
	"errors"
	"kvrouter/internal/golden"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

var allPlacements = []Placement{PlaceVLLM, PlaceVLLMOld, PlaceSGLang, PlaceSGLangOld}

var bodyHint = Hint{Endpoint: "tcp://10.0.0.7:25000", BlockHashes: []uint64{11, 1<<64 - 1}}

// decode reads JSON the way an engine does, keeping numbers exact.
func decode(t testing.TB, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%v in %s", err, b)
	}
	return v
}

// withoutHints removes every hint field from a decoded body.
func withoutHints(v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	delete(m, keySGLangHint)
	delete(m, keySGLangHintOld)
	if p, ok := m[keyKVTransferParams].(map[string]any); ok {
		delete(p, keyVLLMHint)
		delete(p, keyVLLMHintOld)
	}
	return m
}

// TestBodyGolden strips and attaches hints to every body under
// testdata/body/in, comparing with testdata/body/out, and checks what an
// engine would read from the result.
func TestBodyGolden(t *testing.T) {
	ins, err := filepath.Glob(filepath.Join("testdata", "body", "in", "*.json"))
	if err != nil || len(ins) == 0 {
		t.Fatalf("no bodies: %v", err)
	}
	for _, in := range ins {
		name := strings.TrimSuffix(filepath.Base(in), ".json")
		body, err := os.ReadFile(in)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(name+"/strip", func(t *testing.T) {
			out, stripped, err := Strip(body)
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", "body", "out", name+".strip.json"), out)
			if stripped == bytes.Equal(out, body) {
				t.Errorf("stripped=%v but the body changed=%v", stripped, !bytes.Equal(out, body))
			}
			if _, _, found, _ := Extract(out, allPlacements...); found {
				t.Error("a hint survived Strip")
			}
			if want, got := withoutHints(decode(t, body)), decode(t, out); !reflect.DeepEqual(got, want) {
				t.Errorf("Strip changed more than hints:\n got %v\nwant %v", got, want)
			}
		})
		for _, p := range allPlacements {
			t.Run(name+"/"+p.String(), func(t *testing.T) {
				out, err := Attach(body, p, "req-1", bodyHint)
				if err != nil {
					t.Fatal(err)
				}
				golden.Check(t, filepath.Join("testdata", "body", "out", name+"."+p.String()+".json"), out)
				raw, got, found, err := Extract(out, p)
				if err != nil || !found || got != p {
					t.Fatalf("Extract = %v, %v, %v; want placement %v", got, found, err, p)
				}
				parsed, err := Parse(raw)
				if err != nil {
					t.Fatal(err)
				}
				_, _, envelope := p.key()
				if parsed.Flat == envelope || !reflect.DeepEqual(parsed.Hint, bodyHint) ||
					envelope && parsed.MessageID != "req-1" {
					t.Errorf("engine reads %+v", parsed)
				}
				stripped, _, err := Strip(body)
				if err != nil {
					t.Fatal(err)
				}
				want := decode(t, stripped).(map[string]any)
				if _, nested, _ := p.key(); nested {
					if pm, ok := want[keyKVTransferParams].(map[string]any); !ok || pm == nil {
						want[keyKVTransferParams] = map[string]any{}
					}
				}
				if got := withoutHints(decode(t, out)); !reflect.DeepEqual(got, want) {
					t.Errorf("Attach changed more than hints:\n got %v\nwant %v", got, want)
				}
			})
		}
	}
}

func TestStripUntouched(t *testing.T) {
	for _, body := range []string{`{}`, ` {"a":1e400, "b":[{"kv_hints":1}], "c":"router_hint"} `, `{"kv_transfer_params":"x"}`} {
		in := []byte(body)
		out, stripped, err := Strip(in)
		if err != nil || stripped || &out[0] != &in[0] || len(out) != len(in) {
			t.Errorf("Strip(%s) = %s, %v, %v; want the body itself", body, out, stripped, err)
		}
	}
}

func TestBodyErrors(t *testing.T) {
	tests := []struct {
		name string
		body string
		p    Placement
		hint Hint
		want error
	}{
		{"not JSON", `{"a":`, PlaceVLLM, bodyHint, ErrBadBody},
		{"trailing garbage", `{} {}`, PlaceSGLang, bodyHint, ErrBadBody},
		{"array body", `[1,2]`, PlaceSGLang, bodyHint, ErrBadBody},
		{"string body", `"x"`, PlaceSGLang, bodyHint, ErrBadBody},
		{"kv_transfer_params cannot hold a hint", `{"kv_transfer_params":[1]}`, PlaceVLLM, bodyHint, ErrBadBody},
		{"kv_transfer_params as a string", `{"kv_transfer_params":"x"}`, PlaceVLLMOld, bodyHint, ErrBadBody},
		{"hint without a source", `{}`, PlaceVLLM, Hint{BlockHashes: []uint64{1}}, ErrBadSource},
		{"hint without blocks", `{}`, PlaceSGLang, Hint{Endpoint: "tcp://h:1"}, ErrBadBlockHashes},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Attach([]byte(tt.body), tt.p, "r", tt.hint); !errors.Is(err, tt.want) {
				t.Errorf("Attach: err = %v, want %v", err, tt.want)
			}
			if tt.want != ErrBadBody || strings.Contains(tt.name, "kv_transfer_params") {
				return
			}
			if _, _, err := Strip([]byte(tt.body)); !errors.Is(err, ErrBadBody) {
				t.Errorf("Strip: err = %v, want ErrBadBody", err)
			}
			if _, _, _, err := Extract([]byte(tt.body), allPlacements...); !errors.Is(err, ErrBadBody) {
				t.Errorf("Extract: err = %v, want ErrBadBody", err)
			}
		})
	}
	// A string kv_transfer_params is the client's business unless a hint
	// must go there.
	if out, err := Attach([]byte(`{"kv_transfer_params":"x"}`), PlaceSGLang, "r", bodyHint); err != nil ||
		!bytes.HasPrefix(out, []byte(`{"kv_transfer_params":"x","kv_hints":{`)) {
		t.Errorf("Attach with SGLang placement = %s, %v", out, err)
	}
}

// TestExtractPrecedence: each engine reads its own placements, the current
// one before the older, and of a repeated key the last.
func TestExtractPrecedence(t *testing.T) {
	vllm := []Placement{PlaceVLLM, PlaceVLLMOld}
	sglang := []Placement{PlaceSGLang, PlaceSGLangOld}
	type read struct {
		p   Placement
		raw string // "" for none
	}
	tests := []struct {
		body         string
		vllm, sglang read
	}{
		{`{"kv_router_hint":{"a":1},"kv_transfer_params":{"router_hint":{"b":2}}}`, read{PlaceVLLMOld, `{"b":2}`}, read{PlaceSGLangOld, `{"a":1}`}},
		{`{"kv_router_hint":{"a":1},"kv_hints":{"c":3}}`, read{}, read{PlaceSGLang, `{"c":3}`}},
		{`{"kv_transfer_params":{"kv_hint":{"x":1},"router_hint":{}},"kv_hints":{"c":3}}`, read{PlaceVLLM, `{"x":1}`}, read{PlaceSGLang, `{"c":3}`}},
		{`{"kv_hints":{"first":1},"kv_hints":{"last":2}}`, read{}, read{PlaceSGLang, `{"last":2}`}},
		{`{"kv_transfer_params":{"kv_hint":{"first":1}},"kv_transfer_params":{"kv_hint":null,"router_hint":{"b":2}}}`, read{PlaceVLLMOld, `{"b":2}`}, read{}},
		{`{"kv_hints":null,"kv_router_hint":{"a":1}}`, read{}, read{PlaceSGLangOld, `{"a":1}`}},
		{`{"kv_transfer_params":null}`, read{}, read{}},
		{`{"kv_transfer_params":[{"kv_hint":{}}]}`, read{}, read{}},
		{`{"messages":[{"kv_hints":{}}]}`, read{}, read{}},
	}
	for _, tt := range tests {
		for _, e := range []struct {
			from []Placement
			want read
		}{{vllm, tt.vllm}, {sglang, tt.sglang}} {
			raw, p, found, err := Extract([]byte(tt.body), e.from...)
			if err != nil || found != (e.want.raw != "") || p != e.want.p || string(raw) != e.want.raw {
				t.Errorf("Extract(%s, %v) = %s, %v, %v, %v; want %s, %v", tt.body, e.from, raw, p, found, err, e.want.raw, e.want.p)
			}
		}
	}
}

func TestPlacementNames(t *testing.T) {
	for _, p := range allPlacements {
		got, err := ParsePlacement(p.String())
		if err != nil || got != p {
			t.Errorf("ParsePlacement(%q) = %v, %v", p.String(), got, err)
		}
	}
	if _, err := ParsePlacement("trtllm"); err == nil || !strings.Contains(err.Error(), "placement") {
		t.Errorf("ParsePlacement(trtllm) err = %v", err)
	}
	if !slices.Equal(allPlacements, []Placement{0, 1, 2, 3}) {
		t.Error("allPlacements is missing a placement")
	}
}
