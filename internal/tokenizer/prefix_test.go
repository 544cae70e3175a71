package tokenizer

import (
	"bytes"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
)

// prefixTokenizers are tokenizers the prefix cache is tested on, with
// whether it applies to them.
func prefixTokenizers(t testing.TB) map[string]struct {
	tok  *Tokenizer
	safe bool
} {
	t.Helper()
	load := func(b []byte) *Tokenizer {
		tok, err := Load(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	file := func(p string) []byte {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return map[string]struct {
		tok  *Tokenizer
		safe bool
	}{
		"demo":        {Default(), true},
		"qwen3":       {load(realTokenizerJSON(t, "qwen3")), true},
		"llama3-mini": {load(file("testdata/llama3-mini.json")), true},
		"gpt2-mini":   {load(file("testdata/gpt2-mini.json")), true},
		"llama2":      {load(realTokenizerJSON(t, "llama2")), false}, // Metaspace
	}
}

// prefixTexts are texts that stress the cuts: prose, every texts.json
// case glued to prose, and random mixes of words, digits, punctuation,
// whitespace runs, non-ASCII and special-token text.
func prefixTexts(t testing.TB) []string {
	t.Helper()
	prose, err := os.ReadFile("testdata/bench-en.txt")
	if err != nil {
		t.Fatal(err)
	}
	var spec textsSpec
	readJSON(t, "testdata/gen/texts.json", &spec)
	out := []string{string(prose), string(prose[:3000])}
	for _, s := range spec.Texts {
		out = append(out, string(prose[:700])+s+string(prose[700:1500])+s)
	}
	bits := []string{" the", " quick", " brown", "fox", " jumps", ",", ".", " 12345", " 3.14", "\n", "\n\n", "  ", "\t", " ",
		"I'm", " don't", " WE'LL", " café", " 東京", "タワー", " 🍣", "<|im_start|>", "<|im_end|>", "<think>", "<s>", "[INST]",
		" naïve", "ﬁ", " x\u0301", " \u00a0", "\r\n", " ÅB", " word's", "'s", " a", "b", "\xff", " Ａ"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 60 {
		var b strings.Builder
		for b.Len() < 200+r.IntN(3000) {
			b.WriteString(bits[r.IntN(len(bits))])
		}
		out = append(out, b.String())
	}
	return out
}

// TestPrefixCache: encoding through the prefix cache gives the ids of
// encoding whole, cold and warm, for texts that share prefixes with
// earlier ones and for texts cut anywhere; and warm texts do hit it.
func TestPrefixCache(t *testing.T) {
	texts := prefixTexts(t)
	for name, tc := range prefixTokenizers(t) {
		t.Run(name, func(t *testing.T) {
			tok := *tc.tok
			if tc.safe != (tok.prefix != nil) {
				t.Fatalf("prefix cache %v, want %v", tok.prefix != nil, tc.safe)
			}
			if tok.prefix == nil {
				return
			}
			tok.prefix = new(prefixCache) // cold, and not shared with other tests
			whole := tok.WithoutPrefixCache()
			r := rand.New(rand.NewPCG(3, 4))
			for i, text := range texts {
				// The text, a prefix of it cut anywhere, and the text again
				// with something else after it: each through a cache that
				// has seen the others.
				cut := r.IntN(len(text) + 1)
				for _, s := range []string{text, text[:cut], text, text[:cut] + texts[(i+1)%len(texts)]} {
					for _, add := range []bool{false, true} {
						if got, want := tok.Encode(s, add), whole.Encode(s, add); !slices.Equal(got, want) {
							at := 0
							for at < min(len(got), len(want)) && got[at] == want[at] {
								at++
							}
							t.Fatalf("text %d (%d bytes), cut %d: ids differ from position %d: %v, want %v", i, len(s), cut, at,
								got[at:min(at+5, len(got))], want[at:min(at+5, len(want))])
						}
					}
				}
			}
			// The first chunk of a text seen before is cached.
			text := texts[0]
			p := nextCut(text, 0)
			if p < 0 {
				t.Fatal("bench text has no cut")
			}
			if tok.prefix.table() == nil {
				t.Fatal("no table")
			}
			hits := 0
			k0, k1 := uint64(prefixSeed0), uint64(prefixSeed1)
			for pos := 0; pos >= 0 && pos < len(text); {
				p := nextCut(text, pos)
				if p < 0 {
					break
				}
				k0, k1 = hashChunk(text[pos:p], k0, k1)
				if tok.prefix.sets[k0>>(64-prefixBits)].get(k0, k1) != nil {
					hits++
				}
				pos = p
			}
			if hits < 10 {
				t.Errorf("%d chunks of a text encoded twice are cached", hits)
			}
		})
	}
}

// FuzzPrefixCache holds chunked encoding to whole encoding on the demo
// tokenizer, for a text and for a text sharing its prefix.
func FuzzPrefixCache(f *testing.F) {
	for _, s := range []string{"Hello world", strings.Repeat("the quick brown fox jumps over the lazy dog ", 20), "a b\n\n c  d 12 <|im_start|>x"} {
		f.Add(s, 3)
	}
	tok := *Default()
	tok.prefix = new(prefixCache)
	whole := tok.WithoutPrefixCache()
	f.Fuzz(func(t *testing.T, s string, n int) {
		// Long enough to be cut: the fuzzer's text repeated.
		long := strings.Repeat(s+" lorem ipsum dolor sit amet ", 1+min(max(n, 0), 20))
		for _, x := range []string{long, long[:len(long)/2] + s} {
			if got, want := tok.Encode(x, false), whole.Encode(x, false); !slices.Equal(got, want) {
				t.Fatalf("%q: %v, want %v", x, got, want)
			}
		}
	})
}

// TestNextCut: the word-at-a-time scan finds the cut the byte-at-a-time
// definition does.
func TestNextCut(t *testing.T) {
	for _, text := range prefixTexts(t) {
		for from := 0; from < len(text); from += 7 {
			want := -1
			for i := from + minChunk; i < len(text); i++ {
				if isCut(text, i) {
					want = i
					break
				}
			}
			if got := nextCut(text, from); got != want {
				t.Fatalf("nextCut from %d of %.40q…: %d, want %d", from, text, got, want)
			}
		}
	}
}
