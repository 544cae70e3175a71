package mocker

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

func TestFillBlock(t *testing.T) {
	block := func(seed, prefix uint64) []byte {
		b := make([]byte, 1024)
		fillBlock(b, seed, prefix)
		return b
	}
	base := block(1, 42)
	cases := []struct {
		name         string
		seed, prefix uint64
		same         bool
	}{
		{"same seed and prefix", 1, 42, true},
		{"other model seed", 2, 42, false},
		{"other prefix", 1, 43, false},
	}
	for _, c := range cases {
		if got := bytes.Equal(block(c.seed, c.prefix), base); got != c.same {
			t.Errorf("%s: equal %v, want %v", c.name, got, c.same)
		}
	}
	if bytes.Count(base, []byte{0}) > len(base)/16 {
		t.Fatal("block bytes look unfilled")
	}
	// A shard is a slice of the whole block, whatever the TP size.
	half := make([]byte, 512)
	fillBlock(half, 1, 42)
	if !bytes.Equal(half, base[:512]) {
		t.Fatal("a shorter fill is not a prefix of the longer one")
	}
}

func TestVocab(t *testing.T) {
	v := testVocab
	if len(v.ids) < 100 {
		t.Fatalf("only %d word-like tokens", len(v.ids))
	}
	for i, id := range v.ids {
		if strings.Contains(v.text[i], "<|") || !wordLike(v.text[i]) {
			t.Fatalf("token %d %q is not word-like", id, v.text[i])
		}
	}
	a, b := v.generate(1, 50), v.generate(1, 50)
	if !slices.Equal(a, b) || slices.Equal(a, v.generate(2, 50)) {
		t.Fatal("generation is not a function of its seed")
	}
	// Streaming decodes token by token; the whole answer decodes at once.
	var each strings.Builder
	for _, id := range a {
		each.WriteString(v.textOf(id))
	}
	if whole := tokenizerDecode(a); each.String() != whole {
		t.Fatalf("token-by-token %q differs from whole %q", each.String(), whole)
	}
}

func TestWordLike(t *testing.T) {
	for s, want := range map[string]bool{
		" word": true, "word": true, ".": true, ",": true,
		"": false, " ": false, "  two": false, "<think>": false, "é": false, "a1": false, "\n": false,
	} {
		if wordLike(s) != want {
			t.Errorf("wordLike(%q) = %v", s, !want)
		}
	}
}
