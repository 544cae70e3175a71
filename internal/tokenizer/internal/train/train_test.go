package train_test

import (
	"bytes"
	"os"
	"slices"
	"testing"

	"kvrouter/internal/tokenizer"
	"kvrouter/internal/tokenizer/internal/pretok"
	"kvrouter/internal/tokenizer/internal/train"
)

// TestDemoReproducible checks that the committed tokenizer.json is what
// the generator writes; run `go generate ./internal/tokenizer` after
// changing the sample or the trainer.
func TestDemoReproducible(t *testing.T) {
	committed, err := os.ReadFile("../../kvrouter-demo.json")
	if err != nil {
		t.Fatal(err)
	}
	if got := train.DemoJSON(); !bytes.Equal(got, committed) {
		t.Fatalf("kvrouter-demo.json is stale: the generator writes %d bytes that differ from the committed %d; run go generate ./internal/tokenizer", len(got), len(committed))
	}
	if len(committed) > 100<<10 {
		t.Errorf("kvrouter-demo.json is %d bytes, want under 100 KiB", len(committed))
	}
}

// TestEncodeMatchesTraining checks the encoder against the trainer: every
// word of the sample must come out of Encode in the symbols training left
// it in, since both apply the same merges in rank order.
func TestEncodeMatchesTraining(t *testing.T) {
	merges := train.Learn(train.Sample, pretok.Qwen2, train.DemoMerges, train.DemoMinCount)
	if len(merges) < 300 {
		t.Fatalf("learned %d merges, want a few hundred", len(merges))
	}
	tok := tokenizer.Default()
	words := pretok.Qwen2.Split(nil, train.Sample)
	for _, w := range words {
		var want []uint32
		for _, sym := range train.Segment(w, merges) {
			id, ok := tok.TokenID(string(pretok.AppendEncoded(nil, sym)))
			if !ok {
				t.Fatalf("symbol %q of %q is not in the vocabulary", sym, w)
			}
			want = append(want, id)
		}
		if got := tok.Encode(w, false); !slices.Equal(got, want) {
			t.Errorf("Encode(%q) = %v, training segmented it as %v", w, got, want)
		}
	}
}

func TestLearn(t *testing.T) {
	tests := []struct {
		text string
		n    int
		want []train.Merge
	}{
		// Six "a a" pairs; merging them left to right leaves "aa aa"
		// twice; " aaaa" occurs once, under the minimum count.
		{"aaaa aaaa", 5, []train.Merge{{A: "a", B: "a"}, {A: "aa", B: "aa"}}},
		// "a b", " c" and "c d" all occur twice: ties break by byte order.
		{"ab cd ab cd", 1, []train.Merge{{A: " ", B: "c"}}},
		{"xyz", 3, nil},
	}
	for _, tt := range tests {
		got := train.Learn(tt.text, pretok.GPT2, tt.n, 2)
		if !slices.Equal(got, tt.want) {
			t.Errorf("Learn(%q, %d) = %q, want %q", tt.text, tt.n, got, tt.want)
		}
	}
}
