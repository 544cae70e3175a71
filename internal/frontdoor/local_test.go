package frontdoor

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"kvrouter/internal/tokenizer"
)

// modelDir writes a small Llama 3 style model directory: the llama3-mini
// tokenizer and a config whose template puts the BOS and role markers.
func modelDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	tok, err := os.ReadFile("../tokenizer/testdata/llama3-mini.json")
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "tokenizer.json"), string(tok))
	write(t, filepath.Join(dir, "tokenizer_config.json"), `{"bos_token":"<|begin_of_text|>","chat_template":`+
		`"{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{% if tools %}(tools){% endif %}{% if add_generation_prompt %}[assistant]{% endif %}"}`)
	return dir
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestLoadLocal: --tokenizer, --tokenizer-config and --chat-template load
// what the model's engine would render, or fail naming the flag.
func TestLoadLocal(t *testing.T) {
	demoChat := tokenizer.Demo().Chat
	dir := modelDir(t)
	jinja := filepath.Join(t.TempDir(), "t.jinja")
	write(t, jinja, "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}\n")
	bad := filepath.Join(t.TempDir(), "bad.jinja")
	write(t, bad, "{% for m in messages %}")
	chat := `{"model":"m","messages":[{"role":"user","content":"Hello"}]}`
	tests := []struct {
		path, config, tmpl string
		want, err          string
	}{
		{path: TokenizerDemo, want: "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"},
		{path: TokenizerDemo, tmpl: "plain", want: "user: Hello\nassistant: "},
		{path: TokenizerDemo, tmpl: jinja, want: "<user>Hello"},
		{path: dir, want: "<|begin_of_text|>[user]Hello[assistant]"},
		{path: filepath.Join(dir, "tokenizer.json"), config: filepath.Join(dir, "tokenizer_config.json"), want: "<|begin_of_text|>[user]Hello[assistant]"},
		{path: dir, tmpl: jinja, want: "<user>Hello"},
		{path: filepath.Join(dir, "tokenizer.json"), err: "no chat template"},
		{path: "", err: "--tokenizer"},
		{path: TokenizerEngine, err: "--tokenizer engine"},
		{path: "/nonexistent", err: "--tokenizer /nonexistent"},
		{path: TokenizerDemo, config: "x.json", err: "--tokenizer-config"},
		{path: TokenizerDemo, tmpl: "/nonexistent.jinja", err: "--chat-template"},
		{path: TokenizerDemo, tmpl: bad, err: "--chat-template"},
	}
	for _, tc := range tests {
		name := strings.Join([]string{tc.path, tc.config, tc.tmpl}, " ")
		l, err := LoadLocal(tc.path, tc.config, tc.tmpl)
		if err == nil {
			var cr *tokenizer.ChatRequest
			cr, _, err = ParseChat([]byte(chat))
			if err != nil {
				t.Fatal(err)
			}
			var text string
			var ids []uint32
			if text, ids, err = l.Chat(cr, false); err == nil {
				if text != tc.want {
					t.Errorf("%s: rendered %q, want %q", name, text, tc.want)
				}
				if want := l.Model.Tok.Encode(text, false); !reflect.DeepEqual(ids, want) {
					t.Errorf("%s: ids %v, want %v", name, ids, want)
				}
			}
		}
		if tc.err == "" && err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: error %v, want it to name %q", name, err, tc.err)
		}
	}
	if tokenizer.Demo().Chat != demoChat {
		t.Error("--chat-template changed the shared demo model")
	}
}

// TestLocalTokenize: what the front door tokenizes is what LoadLocal's
// Text and Chat give for the body, with the engines' defaults for
// add_special_tokens and the body's own when it says.
func TestLocalTokenize(t *testing.T) {
	l, err := LoadLocal(modelDir(t), "", "")
	if err != nil {
		t.Fatal(err)
	}
	bos, _ := l.Model.Tok.TokenID("<|begin_of_text|>")
	tok := func(kind Kind, body string) ([]uint32, error) {
		req, err := parseRequest(kind, []byte(body))
		if err != nil {
			return nil, err
		}
		return l.Tokenize(context.Background(), req)
	}
	enc := func(s string, add bool) []uint32 { return l.Model.Tok.Encode(s, add) }
	tests := []struct {
		kind Kind
		body string
		want []uint32
		err  error
	}{
		{KindCompletion, `{"model":"m","prompt":"Hello world"}`, enc("Hello world", true), nil},
		{KindCompletion, `{"model":"m","prompt":"Hello world","add_special_tokens":false}`, enc("Hello world", false), nil},
		{KindCompletion, `{"model":"m","prompt":[1,2]}`, []uint32{1, 2}, nil},
		{KindChat, `{"model":"m","messages":[{"role":"user","content":"Hi"}]}`, enc("<|begin_of_text|>[user]Hi[assistant]", false), nil},
		{KindChat, `{"model":"m","messages":[{"role":"user","content":"Hi"}],"add_generation_prompt":false,"tools":[{"type":"function","function":{"name":"f"}}]}`,
			enc("<|begin_of_text|>[user]Hi(tools)", false), nil},
		{KindChat, `{"model":"m","messages":[{"role":"user","content":"Hi"}],"add_special_tokens":true}`,
			append([]uint32{bos}, enc("<|begin_of_text|>[user]Hi[assistant]", false)...), nil},
		{KindChat, `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, nil, nil},
		{KindChat, `{"model":"m","messages":[{"role":"user","content":"Hi"}],"continue_final_message":true}`, nil, ErrBadRequest},
		{KindChat, `{"model":"m","messages":[{"role":"user","content":"Hi"}],"add_special_tokens":"yes"}`, nil, ErrBadRequest},
	}
	for _, tc := range tests {
		got, err := tok(tc.kind, tc.body)
		if !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
			t.Errorf("%s: error %v, want %v", tc.body, err, tc.err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.body, got, tc.want)
		}
	}
}

// TestEngineTokenizerChat: chats go to workers whose /tokenize renders
// them, with what shapes the prompt; SGLang's alone cannot.
func TestEngineTokenizerChat(t *testing.T) {
	var got TokenizeQuery
	e := httptest.NewServer(jsonHandler(func(q TokenizeQuery) []uint32 { got = q; return []uint32{7} }))
	t.Cleanup(e.Close)
	body := `{"model":"m","messages":[{"role":"user","content":"Hi"}],"tools":[{"type":"function"}],` +
		`"chat_template_kwargs":{"enable_thinking":false},"add_generation_prompt":false,"continue_final_message":true}`
	req, err := parseRequest(KindChat, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	mixed := NewEngine(e.Client(), func(string) []EngineTarget {
		return []EngineTarget{{URL: "http://127.0.0.1:1"}, {URL: e.URL, Chats: true}}
	}, 8)
	for range 3 { // whichever the round robin starts with
		mixed.cache = newLRU(8)
		ids, err := mixed.Tokenize(context.Background(), req)
		if err != nil || !reflect.DeepEqual(ids, []uint32{7}) {
			t.Fatalf("%v %v", ids, err)
		}
	}
	if string(got.Messages) != `[{"role":"user","content":"Hi"}]` || string(got.Tools) != `[{"type":"function"}]` ||
		string(got.ChatTemplateKwargs) != `{"enable_thinking":false}` || got.AddGenerationPrompt == nil || *got.AddGenerationPrompt ||
		!got.ContinueFinalMessage || got.AddSpecialTokens || got.Prompt != nil {
		t.Errorf("asked %+v", got)
	}
	sglang := NewEngine(e.Client(), func(string) []EngineTarget { return []EngineTarget{{URL: e.URL}} }, 8)
	if _, err := sglang.Tokenize(context.Background(), req); !errors.Is(err, ErrNoChatTokenize) {
		t.Errorf("SGLang chat: %v", err)
	}
}

// jsonHandler answers POST /tokenize with the ids f gives for the query.
func jsonHandler(f func(TokenizeQuery) []uint32) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /tokenize", func(w http.ResponseWriter, r *http.Request) {
		var q TokenizeQuery
		if err := json.NewDecoder(r.Body).Decode(&q); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ids := f(q)
		json.NewEncoder(w).Encode(map[string]any{"tokens": ids, "count": len(ids), "max_model_len": 1024})
	})
	return mux
}
