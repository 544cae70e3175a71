package tokenizer

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tests in this file check real tokenizer files and chat templates
// against outputs of the reference implementations, produced by
// testdata/gen (see its README).

var realJSON sync.Map // name -> []byte, the decompressed tokenizer.json

func realTokenizerJSON(t testing.TB, name string) []byte {
	t.Helper()
	if b, ok := realJSON.Load(name); ok {
		return b.([]byte)
	}
	f, err := os.Open("testdata/models/" + name + "/tokenizer.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	realJSON.Store(name, b)
	return b
}

// realModelDir lays a model directory out as engines find it.
func realModelDir(t testing.TB, name string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), realTokenizerJSON(t, name), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile("testdata/models/" + name + "/tokenizer_config.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

type textsSpec struct {
	Texts       []string `json:"texts"`
	InvalidUTF8 []struct {
		GoHex string `json:"go_hex"`
		Text  string `json:"text"`
	} `json:"invalid_utf8"`
	Variants map[string]struct {
		Base string                     `json:"base"`
		Set  map[string]json.RawMessage `json:"set"`
	} `json:"variants"`
}

type idCase struct {
	Text    string   `json:"text"`
	Plain   []uint32 `json:"plain"`
	Special []uint32 `json:"special"`
}

func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// variantJSON applies the edits of a texts.json variant to its base file.
func variantJSON(t testing.TB, spec *textsSpec, name string) []byte {
	v, ok := spec.Variants[name]
	if !ok {
		return realTokenizerJSON(t, name)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(realTokenizerJSON(t, v.Base), &doc); err != nil {
		t.Fatal(err)
	}
	for k, val := range v.Set {
		doc[k] = val
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRealTokenizers(t *testing.T) {
	if testing.Short() {
		t.Skip("loads 150k-token vocabularies")
	}
	var spec textsSpec
	readJSON(t, "testdata/gen/texts.json", &spec)
	var want map[string]json.RawMessage
	readJSON(t, "testdata/expected-ids.json", &want)
	for name, raw := range want {
		if name == "chats" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			var cases []idCase
			if err := json.Unmarshal(raw, &cases); err != nil {
				t.Fatal(err)
			}
			tok, err := Load(bytes.NewReader(variantJSON(t, &spec, name)))
			if err != nil {
				t.Fatal(err)
			}
			byText := map[string]idCase{}
			for _, c := range cases {
				byText[c.Text] = c
				if got := tok.Encode(c.Text, false); !slices.Equal(got, c.Plain) {
					t.Errorf("Encode(%q, false)\n got %v\nwant %v", c.Text, got, c.Plain)
				}
				if got := tok.Encode(c.Text, true); !slices.Equal(got, c.Special) {
					t.Errorf("Encode(%q, true)\n got %v\nwant %v", c.Text, got, c.Special)
				}
			}
			// Invalid UTF-8 tokenizes as its U+FFFD replacement.
			for _, c := range spec.InvalidUTF8 {
				raw, _ := hex.DecodeString(c.GoHex)
				if got := tok.Encode(string(raw), false); !slices.Equal(got, byText[c.Text].Plain) {
					t.Errorf("Encode(%q) = %v, want %v (the ids of %q)", raw, got, byText[c.Text].Plain, c.Text)
				}
			}
		})
	}
}

// TestRealModelDirs loads the model directories as engines do, with the
// config's add_bos_token rules, and encodes completions with special
// tokens.
func TestRealModelDirs(t *testing.T) {
	if testing.Short() {
		t.Skip("loads 150k-token vocabularies")
	}
	var want map[string][]idCase
	raw := map[string]json.RawMessage{}
	readJSON(t, "testdata/expected-ids.json", &raw)
	want = map[string][]idCase{}
	for _, name := range []string{"qwen3", "llama2"} {
		var c []idCase
		if err := json.Unmarshal(raw[name], &c); err != nil {
			t.Fatal(err)
		}
		want[name] = c
	}
	for name, cases := range want {
		m, err := LoadModel(realModelDir(t, name), "")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, c := range cases {
			if got := m.EncodeText(c.Text, true); !slices.Equal(got, c.Special) {
				t.Errorf("%s: EncodeText(%q, true) = %v, want %v", name, c.Text, got, c.Special)
			}
		}
	}
}

type chatsSpec struct {
	Templates map[string]struct {
		File          string         `json:"file"`
		SpecialTokens map[string]any `json:"special_tokens"`
	} `json:"templates"`
	Chats map[string]json.RawMessage `json:"chats"`
}

var fixedNow = func() time.Time { return time.Date(2025, 3, 7, 12, 0, 0, 0, time.UTC) }

func configOf(special map[string]any) *Config {
	c := &Config{SpecialTokens: map[string]string{}, ChatTemplates: map[string]string{}}
	for k, v := range special {
		switch v := v.(type) {
		case string:
			c.SpecialTokens[k] = v
		case []any:
			for _, s := range v {
				c.AdditionalSpecialTokens = append(c.AdditionalSpecialTokens, s.(string))
			}
		}
	}
	return c
}

// lenient lists the renderings where Jinja2 raises and ardanlabs/jinja,
// more lenient with None, renders: GPT-OSS reads parameters of a tool
// that has none. The engine rejects such a request, so the router's prompt
// for it does not matter.
var lenient = map[string]bool{"gpt-oss/tools": true}

// TestRealChatTemplates renders real templates as vLLM does through
// transformers: the expected prompts come from Jinja2 itself.
func TestRealChatTemplates(t *testing.T) {
	var spec chatsSpec
	readJSON(t, "testdata/gen/chats.json", &spec)
	var want map[string]string
	readJSON(t, "testdata/gen/chats.expected.json", &want)
	for tname, ti := range spec.Templates {
		src, err := os.ReadFile("testdata/templates/" + ti.File)
		if err != nil {
			t.Fatal(err)
		}
		tmpl, err := NewChatTemplate(string(src))
		if err != nil {
			t.Fatalf("%s: %v", tname, err)
		}
		tmpl.Now = fixedNow
		cfg := configOf(ti.SpecialTokens)
		for cname, body := range spec.Chats {
			name := tname + "/" + cname
			t.Run(name, func(t *testing.T) {
				req, err := ParseChatRequest(body)
				if err != nil {
					t.Fatal(err)
				}
				got, err := tmpl.Apply(req, cfg)
				exp := want[name]
				if strings.HasPrefix(exp, "ERROR") && !lenient[name] {
					if err == nil {
						t.Fatalf("rendered %q, want an error (Jinja2: %s)", got, exp)
					}
					if !errors.Is(err, ErrTemplate) && !errors.Is(err, ErrBadMessage) {
						t.Fatalf("error %v wraps neither ErrTemplate nor ErrBadMessage", err)
					}
					return
				}
				if err != nil {
					t.Fatalf("Apply: %v", err)
				}
				if lenient[name] {
					return
				}
				if got != exp {
					t.Errorf("prompt differs from Jinja2's at byte %d\n got %q\nwant %q", firstDiff(got, exp), got, exp)
				}
			})
		}
	}
}

func firstDiff(a, b string) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

// TestRealChatIDs runs a chat request through the Qwen3 model directory,
// the path the router takes: template from tokenizer_config.json, then
// tokenization without added special tokens.
func TestRealChatIDs(t *testing.T) {
	if testing.Short() {
		t.Skip("loads a 150k-token vocabulary")
	}
	var spec chatsSpec
	readJSON(t, "testdata/gen/chats.json", &spec)
	var raw map[string]json.RawMessage
	readJSON(t, "testdata/expected-ids.json", &raw)
	var want map[string][]uint32
	if err := json.Unmarshal(raw["chats"], &want); err != nil {
		t.Fatal(err)
	}
	dir := realModelDir(t, "qwen3")
	m, err := LoadModel(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	// The config's template is the one in testdata/templates/qwen3.jinja.
	src, _ := os.ReadFile("testdata/templates/qwen3.jinja")
	if m.Chat == nil || normalizeTemplateSource(m.Chat.Source()) != normalizeTemplateSource(string(src)) {
		t.Fatal("tokenizer_config.json's chat_template was not loaded")
	}
	for name, ids := range want {
		req, err := ParseChatRequest(spec.Chats[strings.TrimPrefix(name, "qwen3/")])
		if err != nil {
			t.Fatal(err)
		}
		_, got, err := m.EncodeChat(req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !slices.Equal(got, ids) {
			t.Errorf("%s: ids\n got %v\nwant %v", name, got, ids)
		}
	}
}
