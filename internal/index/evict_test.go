package index

import (
	"fmt"
	"testing"

	"kvrouter/internal/kvhash"
)

// chain returns the local hashes of test chain c: 8 blocks.
func chain(c int) []uint64 {
	out := make([]uint64, 8)
	for i := range out {
		out[i] = uint64(c*100 + i + 1)
	}
	return out
}

func storeChain(t *testing.T, ix *Index, src Source, c int) {
	t.Helper()
	l := chain(c)
	if err := ix.Apply(src, Op{Kind: OpStore, Local: l, Hashes: engines(1000, l)}); err != nil {
		t.Fatal(err)
	}
}

// present counts chain c's blocks still indexed and checks they form a
// prefix: evicting a block takes its descendants.
func present(t *testing.T, ix *Index, c int) int {
	t.Helper()
	n, hole := 0, false
	for i, seq := range kvhash.SequenceHashes(chain(c)) {
		sh := &ix.shards[shardOf(seq)]
		sh.mu.RLock()
		_, ok := sh.find(seq)
		sh.mu.RUnlock()
		switch {
		case ok && hole:
			t.Fatalf("chain %d: block %d kept after its ancestor was evicted", c, i)
		case ok:
			n++
		default:
			hole = true
		}
	}
	return n
}

func TestEvictionKeepsRecentlyMatched(t *testing.T) {
	const max = 64
	ix, err := New(Config{BlockSize: 16, MaxBlocks: max})
	if err != nil {
		t.Fatal(err)
	}
	for c := range 6 {
		storeChain(t, ix, w0, c)
	}
	// Match chain 0 for a few epochs: it becomes the most recent.
	for range 3 << epochShift {
		ix.Match(chain(0), MatchOptions{})
	}
	// A child stored under chain 1 inherits chain 1's (old) recency, so it
	// goes no later than its parent.
	if err := ix.Apply(w0, under(1000+chain(1)[7], dev, 999)); err != nil {
		t.Fatal(err)
	}
	child := kvhash.SequenceHash(kvhash.SequenceHashes(chain(1))[7], 999)
	for c := 6; c < 12; c++ {
		storeChain(t, ix, w0, c)
		if ix.Len() > max {
			t.Fatalf("after chain %d: %d blocks over the cap %d", c, ix.Len(), max)
		}
	}
	st := ix.Stats()
	if st.Evicted == 0 || st.Blocks+int(st.Evicted) != 12*8+1 {
		t.Fatalf("stats %+v: evictions do not account for the blocks stored", st)
	}
	if got := present(t, ix, 0); got != 8 {
		t.Errorf("recently matched chain 0 lost blocks: %d of 8 left", got)
	}
	for c := 6; c < 12; c++ {
		if got := present(t, ix, c); got != 8 {
			t.Errorf("newest chain %d lost blocks: %d of 8 left", c, got)
		}
	}
	sh := &ix.shards[shardOf(child)]
	if _, ok := sh.find(child); ok && present(t, ix, 1) < 8 {
		t.Errorf("child kept after its parent was evicted")
	}
	old := 0
	for c := 1; c < 6; c++ {
		old += present(t, ix, c)
	}
	if old == 5*8 {
		t.Errorf("nothing evicted from the least recent chains")
	}
	checkInvariants(t, ix)

	// A source removing an evicted block is told nothing, and counted.
	before, kept := ix.Stats().UnknownRemove, present(t, ix, 1)
	if kept == 8 {
		t.Fatalf("chain 1, the least recent, kept all its blocks")
	}
	l := chain(1)
	if err := ix.Apply(w0, remove(dev, engines(1000, l)...)); err != nil {
		t.Fatal(err)
	}
	if got := ix.Stats().UnknownRemove - before; got != uint64(8-kept) {
		t.Errorf("removing %d evicted blocks counted %d unknown", 8-kept, got)
	}
	checkInvariants(t, ix)
}

// Eviction under churn: many sources, random matches; the cap always holds
// and the structure stays consistent.
func TestEvictionChurn(t *testing.T) {
	for _, max := range []int{16, 100, 1000} {
		t.Run(fmt.Sprint(max), func(t *testing.T) {
			w := newWorld(uint64(max), 8, 60, 12)
			ix, _ := New(Config{BlockSize: 4, MaxBlocks: max})
			m := newModel() // only to generate plausible ops
			for i := range 3000 {
				src := w.sources[w.rng.IntN(len(w.sources))]
				op := w.randomOp(m, src)
				_ = m.apply(src, op)
				_ = ix.Apply(src, op)
				if ix.Len() > max {
					t.Fatalf("op %d: %d blocks over the cap %d", i, ix.Len(), max)
				}
				if i%7 == 0 {
					ix.Match(w.paths[w.rng.IntN(len(w.paths))], MatchOptions{Chains: true})
				}
			}
			checkInvariants(t, ix)
		})
	}
}

func TestRebase(t *testing.T) {
	ix, _ := New(Config{BlockSize: 16, MaxBlocks: 100})
	storeChain(t, ix, w0, 0)
	storeChain(t, ix, w0, 1)
	seq0 := kvhash.SequenceHashes(chain(0))[0]
	seq1 := kvhash.SequenceHashes(chain(1))[0]
	stamp := func(seq uint64) uint32 {
		sh := &ix.shards[shardOf(seq)]
		pos, _ := sh.find(seq)
		return sh.at(pos).loadStamp()
	}
	ix.clock.Store(rebaseAt<<epochShift - 2)
	ix.Match(chain(0)[:1], MatchOptions{}) // epoch rebaseAt-1
	if got := stamp(seq0); got != rebaseAt-1 {
		t.Fatalf("stamp %d before rebase", got)
	}
	ix.Match(chain(1)[:1], MatchOptions{}) // crosses rebaseAt
	if got, want := stamp(seq0), uint32(rebaseAt-1-rebaseBy); got != want {
		t.Errorf("old stamp %d after rebase, want %d", got, want)
	}
	if got, want := stamp(seq1), uint32(rebaseAt-rebaseBy); got != want {
		t.Errorf("new stamp %d after rebase, want %d", got, want)
	}
	if stamp(seq1) <= stamp(seq0) {
		t.Errorf("rebase broke recency order")
	}
}
