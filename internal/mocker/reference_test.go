package mocker

import (
	"fmt"
	"slices"
	"testing"
)

// TestReference: the engine's answers, computed or served from its cache,
// equal the reference computed without an engine; and the ground truth
// lists the prompt's blocks.
func TestReference(t *testing.T) {
	e := startEngine(t, func(c *Config) { c.KVBytesPerToken = 32 })
	ref := NewReference(e.cfg)
	for _, n := range []int{5, 64, 200, 257} {
		t.Run(fmt.Sprint(n, " tokens"), func(t *testing.T) {
			prompt := make([]uint32, n)
			for i := range prompt {
				prompt[i] = uint32(300 + (i*7+n)%400)
			}
			want := ref.Text(prompt, 8)
			for try := range 2 { // computed, then cached
				got := complete(t, e, map[string]any{"prompt": prompt, "max_tokens": 8}).text()
				if got != want {
					t.Fatalf("try %d: engine %q, reference %q", try, got, want)
				}
			}
			if other := ref.Text(append(prompt[:len(prompt):len(prompt)], 301), 8); other == want {
				t.Fatalf("another prompt gives the same text %q", want)
			}
		})
	}
	if err := e.Idle(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	inv := e.Inventory()
	if len(inv.Ranks) != 1 || len(inv.Ranks[0].GPU) != 64/64+200/64+257/64 {
		t.Fatalf("inventory %+v: want %d GPU blocks", inv, 64/64+200/64+257/64)
	}
	// Every computed block is written through to the runner.
	if !slices.Equal(inv.Ranks[0].Runner, inv.Ranks[0].GPU) {
		t.Fatalf("runner holds %v, GPU %v", inv.Ranks[0].Runner, inv.Ranks[0].GPU)
	}
}
