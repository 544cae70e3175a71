package index

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

// TestConcurrent runs writers of distinct and shared sources, matchers, an
// evicting cap, dumps and source removals at once, for a bounded number of
// iterations; -race checks the memory accesses, the end state is checked
// for consistency, and a rebuild from dumps must match it exactly.
func TestConcurrent(t *testing.T) {
	iters := 1500
	if testing.Short() {
		iters = 300
	}
	cases := []struct {
		nsrc, max, paths int
	}{
		{nsrc: 8, max: 0, paths: 80},
		{nsrc: 8, max: 100, paths: 80},
		{nsrc: 96, max: 0, paths: 6}, // few paths, many sources: dense holder sets
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("sources%d/cap%d", c.nsrc, c.max), func(t *testing.T) {
			max := c.max
			ix, _ := New(Config{BlockSize: 4, MaxBlocks: max})
			w := newWorld(42, c.nsrc, c.paths, 16)
			paths := w.paths
			var wg sync.WaitGroup
			fail := make(chan string, 16)

			// Writers: each goroutine owns a world generator and writes the
			// sources g, g+8, ...; with 8 sources, source 6 is written by two
			// goroutines at once and source 7 by none.
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					gw := newWorld(42, c.nsrc, c.paths, 16) // same sources and paths
					gw.rng = rand.New(rand.NewPCG(uint64(g), 9))
					m := newModel()
					for i := range iters {
						src := gw.sources[min(g, 6)]
						if c.nsrc > 8 {
							src = gw.sources[g+8*(i%(c.nsrc/8))]
						}
						op := gw.randomOp(m, src)
						_ = m.apply(src, op)
						_ = ix.Apply(src, op)
					}
				}()
			}
			// Matchers check what they can without a model.
			for g := range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(g), 10))
					var out []Match
					for range iters {
						q := paths[r.IntN(len(paths))]
						out = ix.AppendMatch(out[:0], q, MatchOptions{Chains: r.IntN(2) == 0})
						for i, m := range out {
							sum := int32(0)
							for _, n := range m.Tiers {
								sum += n
							}
							switch {
							case m.Depth < 1 || int(m.Depth) > len(q):
								fail <- fmt.Sprintf("depth %d for a %d-block query", m.Depth, len(q))
							case m.DeviceDepth > m.Depth || sum != m.Depth:
								fail <- fmt.Sprintf("tiers %+v", m)
							case m.Chain != nil && len(m.Chain) != int(m.Depth):
								fail <- fmt.Sprintf("chain of %d for depth %d", len(m.Chain), m.Depth)
							case i > 0 && m.Depth > out[i-1].Depth:
								fail <- "results not deepest first"
							}
						}
					}
				}()
			}
			// Housekeeping: dumps, stats, conflicts, a source leaving.
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range iters / 10 {
					src := w.sources[i%len(w.sources)]
					for _, op := range ix.Dump(src) {
						if len(op.Seqs) != len(op.Hashes) {
							fail <- "dump op lengths"
						}
					}
					ix.Stats()
					ix.Conflict(w.sources[0], w.sources[3])
					if i%20 == 7 {
						ix.RemoveSource(w.sources[7])
						_ = ix.Apply(w.sources[7], Op{Kind: OpStore, Local: paths[0], Hashes: engines(5, paths[0])})
					}
				}
			}()
			wg.Wait()
			close(fail)
			for f := range fail {
				t.Fatal(f)
			}
			checkInvariants(t, ix)
			if c.nsrc > 64 && !hasDense(ix) {
				t.Fatalf("no holder set turned dense")
			}
			if max > 0 && (ix.Len() > max || ix.Stats().Evicted == 0) {
				t.Fatalf("%d blocks for a cap of %d, %d evicted", ix.Len(), max, ix.Stats().Evicted)
			}

			re, _ := New(Config{BlockSize: 4})
			for _, src := range w.sources {
				if err := re.Apply(src, ix.Dump(src)...); err != nil {
					t.Fatal(err)
				}
			}
			for _, q := range paths {
				sameMatches(t, "rebuilt", re.Match(q, MatchOptions{Chains: true}), ix.Match(q, MatchOptions{Chains: true}))
			}
		})
	}
}
