package tokenizer

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestMaxBytesPerToken: no text, however built to make few tokens, encodes
// to fewer than its length over the bound.
func TestMaxBytesPerToken(t *testing.T) {
	toks := map[string]*Tokenizer{"default": Default()}
	for _, name := range []string{"qwen3", "llama2"} {
		tok, err := Load(bytes.NewReader(realTokenizerJSON(t, name)))
		if err != nil {
			t.Fatal(err)
		}
		toks[name] = tok
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for name, tok := range toks {
		bound := tok.MaxBytesPerToken()
		if bound == 0 {
			t.Fatalf("%s: no bound", name)
		}
		texts := []string{"", " ", strings.Repeat(" ", 5000), strings.Repeat("=", 5000), strings.Repeat("\n", 3000),
			strings.Repeat("Ａ", 2000), strings.Repeat("𝐀", 2000), strings.Repeat("\u212a", 2000), strings.Repeat("<|im_start|>", 300),
			strings.Repeat("the ", 2000), strings.Repeat("😀", 500), string([]byte{0xff, 0xfe, 0x80})}
		// Every vocabulary entry's text, repeated: the longest tokens.
		for id := range uint32(tok.VocabSize()) {
			if _, ok := tok.Token(id); ok && id%97 == 0 {
				texts = append(texts, strings.Repeat(tok.Decode([]uint32{id}), 3))
			}
		}
		for range 200 {
			b := make([]byte, rng.IntN(400))
			for i := range b {
				b[i] = byte(rng.IntN(256))
			}
			texts = append(texts, string(b))
		}
		for _, text := range texts {
			n := len(tok.Encode(text, false))
			if len(text) > bound*n {
				t.Fatalf("%s: %d bytes encode to %d tokens, past the bound of %d bytes per token: %.80q", name, len(text), n, bound, text)
			}
		}
	}
}

// TestMaxBytesPerTokenNone: a pipeline that can drop text of any length
// gives no bound.
func TestMaxBytesPerTokenNone(t *testing.T) {
	tests := []struct {
		name  string
		edits []string
	}{
		{"strip", []string{"\"type\": \"Prepend\",\n    \"prepend\": \"▁\"", "\"type\": \"Strip\",\n    \"strip_left\": true"}},
		{"replace by nothing", []string{"\"content\": \"▁\"", "\"content\": \"\""}},
		{"fused unknowns without fallback", []string{"\"byte_fallback\": true", "\"byte_fallback\": false"}},
		{"an added token that swallows spaces", []string{"\"content\": \"<s>\",\n   \"single_word\": false,\n   \"lstrip\": false",
			"\"content\": \"<s>\",\n   \"single_word\": false,\n   \"lstrip\": true"}},
	}
	if tok := loadFixture(t, "llama2-mini.json"); tok.MaxBytesPerToken() == 0 {
		t.Fatal("llama2-mini: no bound as it is")
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := loadFixture(t, "llama2-mini.json", tc.edits...).MaxBytesPerToken(); got != 0 {
				t.Fatalf("bound %d, want none", got)
			}
		})
	}
}
