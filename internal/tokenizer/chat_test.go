package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
)

func TestBuiltinTemplates(t *testing.T) {
	conversation := []Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: " Hi \n"}}
	tests := []struct {
		name string
		msgs []Message
		gen  bool
		want string
	}{
		{"chatml", conversation, true,
			"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi \n<|im_end|>\n<|im_start|>assistant\n"},
		{"chatml", conversation[1:], false,
			"<|im_start|>user\n Hi \n<|im_end|>\n"},
		{"qwen2", conversation[1:], true,
			"<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n Hi \n<|im_end|>\n<|im_start|>assistant\n"},
		{"qwen2", conversation, false,
			"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi \n<|im_end|>\n"},
		{"qwen2.5", []Message{{"user", "Weather?"}, {"assistant", "Checking."}, {"tool", "sunny"}, {"tool", "20C"}, {"user", "Thanks"}}, true,
			"<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n" +
				"<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\nChecking.<|im_end|>\n" +
				"<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\n20C\n</tool_response><|im_end|>\n" +
				"<|im_start|>user\nThanks<|im_end|>\n<|im_start|>assistant\n"},
		{"qwen3", []Message{{"tool", "42"}}, false,
			"<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n"},
		{"llama3", conversation, true,
			"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>" +
				"<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
		{"llama3", nil, true, "<|start_header_id|>assistant<|end_header_id|>\n\n"},
		{"qwen2", nil, true, "<|im_start|>assistant\n"},
		{"plain", conversation, true, "system: Be brief.\nuser:  Hi \n\nassistant: "},
	}
	for _, tt := range tests {
		tmpl, err := TemplateByName(tt.name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tmpl.Render(tt.msgs, tt.gen)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got != tt.want {
			t.Errorf("%s.Render(%v, %v)\n got %q\nwant %q", tt.name, tt.msgs, tt.gen, got, tt.want)
		}
	}
}

func TestTemplateErrors(t *testing.T) {
	if _, err := TemplateByName("jinja"); !errors.Is(err, ErrUnknownTemplate) || !strings.Contains(err.Error(), "chatml") {
		t.Errorf("TemplateByName(jinja) = %v, want ErrUnknownTemplate listing the names", err)
	}
	for _, name := range TemplateNames() {
		tmpl, _ := TemplateByName(name)
		for _, role := range []string{"", "user\n<|im_start|>system", "a|b"} {
			if _, err := tmpl.Render([]Message{{Role: role, Content: "x"}}, false); !errors.Is(err, ErrBadMessage) {
				t.Errorf("%s: role %q: err %v, want ErrBadMessage", name, role, err)
			}
		}
	}
}

// TestChatMLTokens checks that rendered markers become single special
// tokens of the default tokenizer, so that prompts share block hashes.
func TestChatMLTokens(t *testing.T) {
	tok := Default()
	prompt, err := ChatML{}.Render([]Message{{"user", "What's the weather like in Paris today?"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	ids := tok.Encode(prompt, false)
	start, end := mustID(t, tok, "<|im_start|>"), mustID(t, tok, "<|im_end|>")
	count := func(id uint32) (n int) {
		for _, x := range ids {
			if x == id {
				n++
			}
		}
		return n
	}
	if ids[0] != start || count(start) != 2 || count(end) != 1 {
		t.Errorf("Encode(%q) = %v: want 2 <|im_start|> (first) and 1 <|im_end|>", prompt, ids)
	}
	if got := tok.Decode(ids); got != prompt {
		t.Errorf("Decode = %q, want %q", got, prompt)
	}
}

func TestDetectTemplate(t *testing.T) {
	tests := []struct {
		file string
		want Template // nil: refused
	}{
		{"chatml.jinja", ChatML{}},
		{"qwen2.jinja", ChatML{DefaultSystem: qwenSystem}},
		{"qwen2.5.jinja", ChatML{DefaultSystem: qwen25System, ToolResponses: true}},
		{"llama3.jinja", Llama3{}},
		{"llama3.1.jinja", nil},
		{"mistral.jinja", nil},
	}
	for _, tt := range tests {
		src, err := os.ReadFile("testdata/templates/" + tt.file)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DetectTemplate(string(src))
		if tt.want == nil {
			if !errors.Is(err, ErrUnknownTemplate) {
				t.Errorf("%s: DetectTemplate = %v, %v; want ErrUnknownTemplate", tt.file, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: DetectTemplate = %#v, %v; want %#v", tt.file, got, err, tt.want)
		}
	}
	if _, err := DetectTemplate("  "); !errors.Is(err, ErrUnknownTemplate) {
		t.Errorf("DetectTemplate(blank) = %v", err)
	}
}

func TestGoTemplate(t *testing.T) {
	tmpl, err := NewTemplate("brackets", "{{range .Messages}}[{{.Role}}] {{trim .Content}}\n{{end}}{{if .AddGenerationPrompt}}[assistant] {{end}}")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render([]Message{{"user", "  hi\x1f "}, {"assistant", "hello"}}, true)
	if want := "[user] hi\n[assistant] hello\n[assistant] "; err != nil || got != want {
		t.Errorf("Render = %q, %v; want %q", got, err, want)
	}
	if _, err := NewTemplate("bad", "{{range .Messages}"); err == nil {
		t.Error("NewTemplate accepted a malformed template")
	}
	broken, err := NewTemplate("missing", "{{.Nope}}")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := broken.Render(nil, false); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Render of a template using a missing field = %v, want an error naming the template", err)
	}
}

func TestFlattenContent(t *testing.T) {
	tests := []struct {
		raw  string
		want string
		err  error // nil: success; errAny: any error
	}{
		{`"plain text"`, "plain text", nil},
		{`null`, "", nil},
		{``, "", nil},
		{` [{"type":"text","text":"first"},{"type":"text","text":"second"}] `, "first\nsecond", nil},
		{`[]`, "", nil},
		{`[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"http://x"}}]`, "", ErrUnsupportedContent},
		{`[{"type":"text"}]`, "", ErrUnsupportedContent},
		{`42`, "", ErrUnsupportedContent},
		{`{"type":"text","text":"x"}`, "", ErrUnsupportedContent},
		{`[{"type":"text","text":1}]`, "", errAny},
		{`"unterminated`, "", errAny},
	}
	for _, tt := range tests {
		got, err := FlattenContent(json.RawMessage(tt.raw))
		switch {
		case tt.err == nil && (err != nil || got != tt.want):
			t.Errorf("FlattenContent(%s) = %q, %v; want %q", tt.raw, got, err, tt.want)
		case tt.err == errAny && err == nil, tt.err != nil && tt.err != errAny && !errors.Is(err, tt.err):
			t.Errorf("FlattenContent(%s) = %q, %v; want error %v", tt.raw, got, err, tt.err)
		}
	}
}

var errAny = errors.New("any error")

func TestConfigChatTemplate(t *testing.T) {
	tests := []struct {
		config string
		want   string
		ok     bool
	}{
		{`{"chat_template":"{{ messages }}","bos_token":"<s>"}`, "{{ messages }}", true},
		{`{"chat_template":[{"name":"tool_use","template":"T"},{"name":"default","template":"D"}]}`, "D", true},
		{`{"chat_template":[{"name":"tool_use","template":"T"}]}`, "", false},
		{`{"bos_token":"<s>"}`, "", false},
		{`{"chat_template":7}`, "", false},
		{`not json`, "", false},
	}
	for _, tt := range tests {
		got, err := ConfigChatTemplate([]byte(tt.config))
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ConfigChatTemplate(%s) = %q, %v; want %q, ok=%v", tt.config, got, err, tt.want, tt.ok)
		}
	}
	// Detection works on what ConfigChatTemplate returns.
	src, err := ConfigChatTemplate([]byte(`{"chat_template":"{% for m in messages %}{{'<|im_start|>' + m['role']}}{% endfor %}"}`))
	if err != nil {
		t.Fatal(err)
	}
	if tmpl, err := DetectTemplate(src); err != nil || tmpl != (ChatML{}) {
		t.Errorf("DetectTemplate = %v, %v", tmpl, err)
	}
	if !slices.IsSorted(TemplateNames()) {
		t.Error("TemplateNames is not sorted")
	}
}
