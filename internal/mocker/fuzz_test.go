package mocker

import (
	"bytes"
	"testing"
)

// The request decoders read outside input; their seed corpora live in
// testdata/fuzz/<target>.

func FuzzCompletion(f *testing.F) {
	sgl, vll := testParser(f, SGLang), testParser(f, VLLM)
	f.Fuzz(func(t *testing.T, body []byte) {
		checkParsed(t, sgl, body, false)
		checkParsed(t, vll, body, false)
	})
}

func FuzzChat(f *testing.F) {
	p := testParser(f, SGLang)
	f.Fuzz(func(t *testing.T, body []byte) {
		checkParsed(t, p, body, true)
	})
}

func checkParsed(t *testing.T, p *parser, body []byte, chat bool) {
	var got parsed
	var err error
	if chat {
		got, err = p.chat(body)
	} else {
		got, err = p.completion(body)
	}
	if err != nil {
		return
	}
	if len(got.tokens) == 0 || got.maxTokens < 1 || len(got.tokens)+got.maxTokens > p.cfg.MaxModelLen {
		t.Fatalf("accepted %d tokens with max_tokens %d", len(got.tokens), got.maxTokens)
	}
	vocab := uint32(p.model.Tok.VocabSize())
	for _, tok := range got.tokens {
		if tok >= vocab {
			t.Fatalf("accepted token %d outside the vocabulary", tok)
		}
	}
	if got.hint != nil && (len(got.hint) == 0 || bytes.Equal(got.hint, []byte("null"))) {
		t.Fatalf("empty hint %q returned as present", got.hint)
	}
}

func FuzzTokenize(f *testing.F) {
	p := testParser(f, SGLang)
	f.Fuzz(func(t *testing.T, body []byte) {
		toks, err := p.tokenize(body)
		if err != nil {
			return
		}
		vocab := uint32(p.model.Tok.VocabSize())
		for _, tok := range toks {
			if tok >= vocab {
				t.Fatalf("token %d outside the vocabulary", tok)
			}
		}
	})
}

func FuzzEvict(f *testing.F) {
	p := testParser(f, VLLM)
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := p.evict(body)
		if err != nil {
			return
		}
		if !req.gpu && !req.runner {
			t.Fatal("accepted an eviction of no tier")
		}
	})
}
