package indexbench

import (
	"testing"

	"kvrouter/internal/index"
)

// TestWorkload: every conversation is a whole prompt, listed once, and
// fully held once the ops are applied; the hot prompts are held by every
// source.
func TestWorkload(t *testing.T) {
	cfg := Config{Sources: 40, Blocks: 20_000, PromptBlocks: 32, Seed: 3}
	w, err := Generate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	events := 0
	for _, o := range w.ops {
		events += int(o.hi - o.lo)
	}
	if events != w.BlockEvents {
		t.Fatalf("ops store %d blocks, BlockEvents says %d", events, w.BlockEvents)
	}
	seen := make(map[uint64]bool)
	for i, c := range w.Convs {
		if len(c) != cfg.PromptBlocks {
			t.Fatalf("conversation %d has %d blocks, want %d", i, len(c), cfg.PromptBlocks)
		}
		if seen[c[len(c)-1]] {
			t.Fatalf("conversation %d listed twice", i)
		}
		seen[c[len(c)-1]] = true
	}
	ix, err := w.Build(0)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range w.Convs {
		m := ix.Match(c, index.MatchOptions{})
		if len(m) == 0 || int(m[0].Depth) != len(c) {
			t.Fatalf("conversation %d not held whole: %+v", i, m)
		}
	}
	for i, h := range w.Hot {
		if m := ix.Match(h, index.MatchOptions{}); len(m) != cfg.Sources {
			t.Fatalf("hot prompt %d held by %d sources, want %d", i, len(m), cfg.Sources)
		}
	}
}
