package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
)

// FuzzLoad feeds arbitrary tokenizer.json bytes to Load; whatever loads
// must encode and decode without panicking.
func FuzzLoad(f *testing.F) {
	// Seeds stay small: the fuzzer minimizes every new input by re-running
	// it per removed byte, which takes minutes on a real tokenizer.json.
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]},"added_tokens":[{"content":"<x>","lstrip":true,"rstrip":true,"single_word":true}]}`))
	f.Add([]byte(`{"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":` + jsonString(tQwen2) + `},"behavior":"Isolated"},{"type":"ByteLevel","use_regex":false}]},` +
		`"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>"}},{"Sequence":{"id":"A"}}],"special_tokens":{"<s>":{"ids":[3]}}},` +
		`"decoder":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{"H":0,"e":1,"He":2,"<s>":3,"Ġ":4},"merges":[["H","e"]],"ignore_merges":true},"added_tokens":[{"id":3,"content":"<s>","special":true}]}`))
	f.Add([]byte(`{"normalizer":{"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},{"type":"Replace","pattern":{"String":" "},"content":"▁"}]},` +
		`"decoder":{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]},` +
		`"model":{"type":"BPE","vocab":{"<unk>":0,"<0x48>":1,"▁":2,"e":3},"merges":[],"unk_token":"<unk>","fuse_unk":true,"byte_fallback":true}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := Load(bytes.NewReader(data))
		if err != nil {
			return
		}
		for _, s := range []string{"", "Hello, world! 123", "<|im_start|>user\n中文 😀<|im_end|>", "a  b\n\n\xff"} {
			ids := tok.Encode(s, true)
			_ = tok.Decode(ids)
			if again := tok.Encode(s, true); !slices.Equal(ids, again) {
				t.Fatalf("Encode(%q) is not deterministic: %v then %v", s, ids, again)
			}
		}
		if tok.VocabSize() < 0 {
			t.Fatal("negative vocabulary size")
		}
	})
}

// FuzzEncode checks, for arbitrary text, that byte-level tokenizers lose
// nothing: decoding gives back the text (invalid UTF-8 replaced as
// tokenizers replaces it), and encoding is deterministic with a warm
// cache.
func FuzzEncode(f *testing.F) {
	for _, s := range []string{"", "Hello world", "I'm  here\n\n  now", "<|im_start|>user\nhi<|im_end|>", "<|im_start", "中文😀", "\xff\xe2\x82", strings.Repeat("a", 100)} {
		f.Add(s)
	}
	toks := []*Tokenizer{Default(), loadFixture(f, "gpt2-mini.json"), loadFixture(f, "llama3-mini.json")}
	f.Fuzz(func(t *testing.T, s string) {
		want := lossyUTF8([]byte(s))
		for _, tok := range toks {
			ids := tok.Encode(s, false)
			if got := tok.Decode(ids); got != want {
				t.Fatalf("Decode(Encode(%q)) = %q, want %q (ids %v)", s, got, want, ids)
			}
			if again := tok.Encode(s, false); !slices.Equal(ids, again) {
				t.Fatalf("Encode(%q) = %v, then %v", s, ids, again)
			}
		}
	})
}

// FuzzFlattenContent feeds arbitrary message content to FlattenContent.
func FuzzFlattenContent(f *testing.F) {
	for _, s := range []string{`"text"`, `null`, `[{"type":"text","text":"a"},{"type":"text","text":"b"}]`, `[{"type":"image_url"}]`, `7`, `[`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := FlattenContent(raw)
		var s string
		if json.Unmarshal(raw, &s) == nil && (err != nil || got != s) {
			t.Fatalf("FlattenContent(%q) = %q, %v; want the string %q", raw, got, err, s)
		}
	})
}

// FuzzChatTemplateConfig feeds arbitrary tokenizer_config.json bytes to
// ConfigChatTemplate and DetectTemplate; a detected template must render.
func FuzzChatTemplateConfig(f *testing.F) {
	for _, name := range []string{"qwen2.5.jinja", "llama3.jinja", "llama3.1.jinja", "mistral.jinja"} {
		src, err := os.ReadFile("testdata/templates/" + name)
		if err != nil {
			f.Fatal(err)
		}
		cfg, _ := json.Marshal(map[string]string{"chat_template": string(src)})
		f.Add(cfg)
	}
	f.Add([]byte(`{"chat_template":[{"name":"default","template":"<|im_start|>"}]}`))
	f.Fuzz(func(t *testing.T, config []byte) {
		src, err := ConfigChatTemplate(config)
		if err != nil {
			return
		}
		tmpl, err := DetectTemplate(src)
		if err != nil {
			return
		}
		if _, err := tmpl.Render([]Message{{"system", "s"}, {"user", "u"}, {"tool", "t"}}, true); err != nil {
			t.Fatalf("detected template does not render: %v", err)
		}
	})
}

// FuzzChatTemplate renders arbitrary requests with arbitrary templates:
// no panic, and the same prompt twice.
func FuzzChatTemplate(f *testing.F) {
	for _, name := range []string{"qwen3.jinja", "gemma3.jinja", "deepseek-v3.jinja", "ministral3.jinja"} {
		src, err := os.ReadFile("testdata/templates/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(src), []byte(`{"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"u"}]},{"role":"assistant","content":"<think>r</think>a","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},{"role":"tool","tool_call_id":"c","content":"1"}],"tools":[{"type":"function","function":{"name":"f"}}],"chat_template_kwargs":{"enable_thinking":false}}`))
	}
	f.Add(`{% for m in messages %}{{ m.content | tojson(indent=2) }}{% break %}{% endfor %}{{ raise_exception('x') if tools }}`, []byte(`{"messages":[{"role":"user","content":null}],"continue_final_message":true,"add_generation_prompt":false}`))
	f.Fuzz(func(t *testing.T, src string, body []byte) {
		tmpl, err := NewChatTemplate(src)
		if err != nil {
			return
		}
		tmpl.Now = fixedNow
		req, err := ParseChatRequest(body)
		if err != nil {
			return
		}
		a, errA := tmpl.Apply(req, &Config{SpecialTokens: map[string]string{"bos_token": "<s>"}})
		b, errB := tmpl.Apply(req, &Config{SpecialTokens: map[string]string{"bos_token": "<s>"}})
		if a != b || (errA == nil) != (errB == nil) {
			t.Fatalf("two renderings differ: %q (%v), then %q (%v)", a, errA, b, errB)
		}
	})
}

// FuzzParseConfig feeds arbitrary tokenizer_config.json bytes to the
// config loader and, when it loads, builds a model with it.
func FuzzParseConfig(f *testing.F) {
	for _, name := range []string{"qwen3", "llama2"} {
		b, err := os.ReadFile("testdata/models/" + name + "/tokenizer_config.json")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"tokenizer_class":"LlamaTokenizerFast","add_eos_token":true,"eos_token":{"content":"<|eot_id|>"},"chat_template":[{"name":"tool_use","template":"{{ x"}]}`))
	tok := loadFixture(f, "llama3-mini.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseConfig(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("ParseConfig error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if m, err := NewModel(tok, cfg); err == nil {
			m.EncodeText("Hello", true)
			if m.Chat != nil {
				m.RenderChat(&ChatRequest{Messages: []byte(`[{"role":"user","content":"hi"}]`)})
			}
		}
	})
}
