package tokenizer

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ardanlabs/jinja"
)

// TestMetaspaceSplit follows tokenizers' Metaspace: spaces become "▁",
// prepend_scheme decides the leading "▁", and split cuts before every "▁"
// (each one a delimiter merged with what follows).
func TestMetaspaceSplit(t *testing.T) {
	tests := []struct {
		m       metaspaceStep
		in      string
		atStart bool
		want    []string
	}{
		{metaspaceStep{repl: "▁", splitOn: true}, "Hey friend", true, []string{"▁Hey", "▁friend"}},
		{metaspaceStep{repl: "▁", splitOn: true}, "   lead", true, []string{"▁", "▁", "▁lead"}},
		{metaspaceStep{repl: "▁", scheme: prependFirst}, "Hey friend", true, []string{"▁Hey▁friend"}},
		{metaspaceStep{repl: "▁", scheme: prependFirst}, "Hey", false, []string{"Hey"}},
		{metaspaceStep{repl: "▁", scheme: prependNever, splitOn: true}, "a b", true, []string{"a", "▁b"}},
		{metaspaceStep{repl: "▁"}, " x", true, []string{"▁x"}},
	}
	for _, tt := range tests {
		if got := tt.m.splitAt(nil, tt.in, tt.atStart); !slices.Equal(got, tt.want) {
			t.Errorf("%+v.splitAt(%q, %v) = %q, want %q", tt.m, tt.in, tt.atStart, got, tt.want)
		}
	}
}

// TestSplitRegex checks the regexp translation on the whitespace tail and
// Unicode classes that Go's regexp spells differently.
func TestSplitRegex(t *testing.T) {
	split := func(expr, s string) []string {
		re, err := compileSplitRegex(expr, "p")
		if err != nil {
			t.Fatalf("%q: %v", expr, err)
		}
		return splitStep{find: re.next, behavior: isolated}.split(nil, s)
	}
	tests := []struct {
		expr, in string
		want     []string
	}{
		{`\p{L}+|\s+(?!\S)|\s+`, "ab   cd\u3000\u3000x  ", []string{"ab", "  ", " ", "cd", "\u3000", "\u3000", "x", "  "}},
		{`\d+`, "a١٢b34", []string{"a", "١٢", "b", "34"}},
		{`[^\s]+`, "a\u00a0b c", []string{"a", "\u00a0", "b", " ", "c"}},
		{`\w+`, "héllo_1 ok", []string{"héllo_1", " ", "ok"}},
	}
	for _, tt := range tests {
		if got := split(tt.expr, tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("split(%q, %q) = %q, want %q", tt.expr, tt.in, got, tt.want)
		}
	}
}

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`{"tokenizer_class":"LlamaTokenizerFast","add_bos_token":true,"add_eos_token":true,
		"bos_token":{"__type":"AddedToken","content":"<s>"},"unk_token":null,"pad_token":"</s>",
		"additional_special_tokens":["<x>",{"content":"<y>"}],
		"chat_template":[{"name":"default","template":"D"},{"name":"tool_use","template":"T"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"bos_token": "<s>", "eos_token": "</s>", "pad_token": "</s>"}
	if len(c.SpecialTokens) != len(want) {
		t.Errorf("SpecialTokens = %v, want %v (class defaults, null dropping unk)", c.SpecialTokens, want)
	}
	for k, v := range want {
		if c.SpecialTokens[k] != v {
			t.Errorf("SpecialTokens[%s] = %q, want %q", k, c.SpecialTokens[k], v)
		}
	}
	if !slices.Equal(c.AdditionalSpecialTokens, []string{"<x>", "<y>"}) || c.ChatTemplates["tool_use"] != "T" || !*c.AddEOS {
		t.Errorf("config = %+v", c)
	}
	for _, bad := range []string{`{`, `{"add_bos_token":"yes"}`, `{"bos_token":7}`, `{"chat_template":5}`} {
		if _, err := ParseConfig([]byte(bad)); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseConfig(%s) = %v, want ErrInvalid", bad, err)
		}
	}
}

// TestConfigPostProcessor: Llama and Gemma tokenizer classes take their BOS
// and EOS from add_bos_token/add_eos_token (as DeepSeek V3 does, whose
// tokenizer.json adds nothing), other classes keep tokenizer.json's.
func TestConfigPostProcessor(t *testing.T) {
	tok := loadFixture(t, "llama3-mini.json")
	bos := mustID(t, tok, "<|begin_of_text|>")
	cfg := func(s string) *Config {
		c, err := ParseConfig([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	tests := []struct {
		cfg  *Config
		want []uint32
	}{
		{nil, []uint32{bos, 9906}},
		{cfg(`{"tokenizer_class":"PreTrainedTokenizerFast","add_bos_token":false}`), []uint32{bos, 9906}},
		{cfg(`{"tokenizer_class":"LlamaTokenizerFast","bos_token":"<|begin_of_text|>","add_bos_token":false}`), []uint32{9906}},
		{cfg(`{"tokenizer_class":"LlamaTokenizerFast","bos_token":"<|begin_of_text|>","eos_token":"<|begin_of_text|>","add_eos_token":true}`), []uint32{bos, 9906, bos}},
	}
	for i, tt := range tests {
		m, err := NewModel(tok, tt.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.EncodeText("Hello", true); !slices.Equal(got, tt.want) {
			t.Errorf("case %d: %v, want %v", i, got, tt.want)
		}
	}
	if _, err := NewModel(tok, cfg(`{"tokenizer_class":"LlamaTokenizer","bos_token":"<nope>"}`)); !errors.Is(err, ErrInvalid) {
		t.Errorf("a BOS missing from the vocabulary: %v, want ErrInvalid", err)
	}
	if got := tok.Encode("Hello", true); !slices.Equal(got, []uint32{bos, 9906}) {
		t.Errorf("NewModel changed the tokenizer it was given: %v", got)
	}
}

func TestLoadModelDir(t *testing.T) {
	dir := t.TempDir()
	tokJSON, _ := os.ReadFile("testdata/llama3-mini.json")
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := LoadModel(dir, ""); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Errorf("a directory without tokenizer.json: %v", err)
	}
	write("tokenizer.json", string(tokJSON))
	write("tokenizer_config.json", `{"bos_token":"<|begin_of_text|>","chat_template":"config {{ bos_token }}"}`)
	m, err := LoadModel(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	req := &ChatRequest{Messages: []byte(`[{"role":"user","content":"hi"}]`)}
	if got, err := m.RenderChat(req); err != nil || got != "config <|begin_of_text|>" {
		t.Errorf("template from the config: %q, %v", got, err)
	}
	// chat_template.jinja wins, and its trailing newline goes, as in Jinja2.
	write("chat_template.jinja", "file {{ messages[0].content }}\n")
	if m, err = LoadModel(dir, ""); err != nil {
		t.Fatal(err)
	}
	if got, err := m.RenderChat(req); err != nil || got != "file hi" {
		t.Errorf("template from chat_template.jinja: %q, %v", got, err)
	}
	// A tokenizer.json path reads no config beside it.
	if m, err = LoadModel(filepath.Join(dir, "tokenizer.json"), ""); err != nil || m.Chat != nil {
		t.Errorf("LoadModel(tokenizer.json) = %v, %v; want no chat template", m, err)
	}
	if _, err := m.RenderChat(req); !errors.Is(err, ErrNoChatTemplate) {
		t.Errorf("chat without a template: %v", err)
	}
	os.Remove(filepath.Join(dir, "chat_template.jinja"))
	write("bad_config.json", `{"chat_template":"{% if %}"}`)
	if _, err := LoadModel(dir, filepath.Join(dir, "bad_config.json")); !errors.Is(err, ErrTemplate) {
		t.Errorf("a template that does not compile: %v, want ErrTemplate", err)
	}
	write("tokenizer.json", strings.Replace(string(tokJSON), `"type": "BPE"`, `"type": "Unigram"`, 1))
	if _, err := LoadModel(dir, ""); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "Unigram") {
		t.Errorf("a Unigram model: %v, want ErrUnsupported naming the type", err)
	}
}

func TestChatRequestShapes(t *testing.T) {
	src := `{% for m in messages %}{{ m | tojson }};{% endfor %}{{ tools | tojson }}|{{ add_generation_prompt }}|{{ x | default('-') }}`
	tmpl, err := NewChatTemplate(src)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"messages":[{"role":"user","content":[{"type":"text","text":"a"},"b",{"type":"text"}],"extra":1},
		{"role":"assistant","content":null,"reasoning":"r","tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{\"z\": 1, \"a\": [2.5]}"}},{"function":{"name":"g","arguments":"not json"}}]},
		{"role":"assistant","content":"x","tool_calls":[]},
		{"role":"tool","tool_call_id":"1","content":"ok","name":"f"}],
		"tools":[{"type":"function","function":{"parameters":{"type":"object"},"name":"f","strict":true}}],
		"chat_template_kwargs":{"x":"X"}}`
	req, err := ParseChatRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Apply(req, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"role": "user", "content": "a\nb"};` +
		`{"role": "assistant", "content": "", "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": {"z": 1, "a": [2.5]}}}, {"function": {"name": "g", "arguments": {}}}], "reasoning": "r", "reasoning_content": "r"};` +
		`{"role": "assistant", "content": "x"};` +
		`{"role": "tool", "content": "ok", "tool_call_id": "1", "name": "f"};` +
		`[{"type": "function", "function": {"name": "f", "description": null, "parameters": {"type": "object"}, "strict": true}}]|True|X`
	if got != want {
		t.Errorf("rendered\n got %s\nwant %s", got, want)
	}
	for _, bad := range []string{`{"messages":[{"content":"x"}]}`, `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"u"}}]}]}`,
		`{"messages":[],"continue_final_message":true}`, `{"messages":[],"chat_template_kwargs":{"tokenize":true}}`, `{"messages":[],"tools":[{"type":"function"}]}`} {
		req, err := ParseChatRequest([]byte(bad))
		if err == nil {
			_, err = tmpl.Apply(req, nil)
		}
		if !errors.Is(err, ErrBadMessage) && !errors.Is(err, ErrUnsupportedContent) {
			t.Errorf("%s: %v, want ErrBadMessage or ErrUnsupportedContent", bad, err)
		}
	}
}

func TestContentFormatDetection(t *testing.T) {
	tests := map[string]bool{
		`{% for m in messages %}{{ m.content }}{% endfor %}`:                                                                   false,
		`{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}`:                                  true,
		`{% set lm = messages[1:] %}{% for m in lm %}{% for p in m['content'] | selectattr('type') %}{% endfor %}{% endfor %}`: true,
		`{% for p in messages[0]['content'] %}{% endfor %}`:                                                                    false,
	}
	for src, want := range tests {
		if got := detectContentFormat(src); got != want {
			t.Errorf("detectContentFormat(%s) = %v, want %v", src, got, want)
		}
	}
}

func TestToJSON(t *testing.T) {
	v, err := decodeOrdered([]byte(`{"b": [1, 2.0, 1e-7, 1e16, 123456789.5, null, true], "a": "é\"\n\u0001<>&😀"}`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		kw   map[string]jinja.Value
		want string
	}{
		{nil, `{"b": [1, 2.0, 1e-07, 1e+16, 123456789.5, null, true], "a": "é\"\n\u0001<>&😀"}`},
		{map[string]jinja.Value{"sort_keys": jinja.NewBool(true), "separators": jinja.NewList([]jinja.Value{jinja.NewString(","), jinja.NewString(":")})},
			`{"a":"é\"\n\u0001<>&😀","b":[1,2.0,1e-07,1e+16,123456789.5,null,true]}`},
		{map[string]jinja.Value{"ensure_ascii": jinja.NewBool(true), "indent": jinja.NewInt(1)},
			"{\n \"b\": [\n  1,\n  2.0,\n  1e-07,\n  1e+16,\n  123456789.5,\n  null,\n  true\n ],\n \"a\": \"\\u00e9\\\"\\n\\u0001<>&\\ud83d\\ude00\"\n}"},
	}
	for _, tt := range tests {
		got, err := filterToJSON([]jinja.Value{v}, tt.kw)
		if err != nil || got.AsString() != tt.want {
			t.Errorf("tojson(%v) = %q, %v\nwant %q", tt.kw, got.AsString(), err, tt.want)
		}
	}
}

func TestStrftime(t *testing.T) {
	now := time.Date(2025, 3, 7, 15, 4, 5, 0, time.UTC)
	if got := strftime(now, "%d %b %Y|%-d %B|%H:%M:%S %p|%y-%m-%j %a %A %%"); got != "07 Mar 2025|7 March|15:04:05 PM|25-03-066 Fri Friday %" {
		t.Errorf("strftime = %q", got)
	}
}

func TestUnsupportedTemplateSyntax(t *testing.T) {
	if _, err := NewChatTemplate("a {%+ if true %}b{% endif %}"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("{%%+: %v, want ErrUnsupported", err)
	}
	tmpl, err := NewChatTemplate(`{{ raise_exception("no system role") }}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmpl.Render([]Message{{"user", "x"}}, true); !errors.Is(err, ErrTemplate) || !strings.Contains(err.Error(), "no system role") {
		t.Errorf("raise_exception: %v", err)
	}
}
