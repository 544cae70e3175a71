package index

import (
	"testing"

	"kvrouter/internal/kvevents"
)

// walkTrace walks local as Match does and reports how far it reached, how
// many blocks walk had to look up in the directory (not found where the
// pipeline predicted them) and how many it took in glide.
func walkTrace(ix *Index, local []uint64) (reached, finds, glided int) {
	tbl := ix.reg.table()
	sc := new(scratch)
	sc.reset(len(tbl.srcs), true, len(local), nil)
	ix.rlockShards()
	reached = ix.walk(sc, local)
	ix.runlockShards()
	return reached, sc.finds, sc.glided
}

// TestWalkFollowsRuns checks the match pipeline's predictions, which no
// result shows: walk looks up only the first block itself (the pipeline
// looks up each later run's start a window ahead), and takes every block
// in glide but the first and those where the holders change. (A run that
// starts inside a window costs a step too; these runs start at a window.)
func TestWalkFollowsRuns(t *testing.T) {
	const blocks, turn = 128, 16
	chain := func(base uint64) []uint64 {
		h := make([]uint64, blocks)
		for i := range h {
			h[i] = base + uint64(i)
		}
		return h
	}
	a, b := WorkerRank("a", 0), WorkerRank("b", 0)
	conv, other := chain(1000), chain(5000)
	store := func(src Source, h []uint64, lo, hi int) Op {
		op := Op{Kind: OpStore, Tier: kvevents.TierDevice, Hashes: h[lo:hi], Local: h[lo:hi]}
		if lo > 0 {
			op.Parent, op.HasParent = h[lo-1], true
		}
		return op
	}
	type step struct {
		src    Source
		h      []uint64
		lo, hi int
	}
	turns := func(src Source, h []uint64, upTo int) []step {
		var s []step
		for lo := 0; lo < upTo; lo += turn {
			s = append(s, step{src, h, lo, min(lo+turn, upTo)})
		}
		return s
	}
	interleave := func(x, y []step) []step {
		var s []step
		for i := range max(len(x), len(y)) {
			if i < len(x) {
				s = append(s, x[i])
			}
			if i < len(y) {
				s = append(s, y[i])
			}
		}
		return s
	}
	fill := func(src Source, runs int) []step {
		var s []step
		for k := range runs {
			s = append(s, step{src, chain(uint64(100_000 * (k + 1)))[:runLen], 0, runLen})
		}
		return s
	}
	tests := []struct {
		name   string
		steps  []step
		glided int
	}{
		{"one store", []step{{a, conv, 0, blocks}}, blocks - 1},
		{"turns", turns(a, conv, blocks), blocks - 1},
		{"turns interleaved with another chain's", interleave(turns(a, conv, blocks), turns(b, other, blocks)), blocks - 1},
		{"two holders all along", interleave(turns(a, conv, blocks), turns(b, conv, blocks)), blocks - 1},
		// b's holding ends inside a run: one more general step there.
		{"holders change at block 40", interleave(turns(a, conv, blocks), turns(b, conv, 40)), blocks - 2},
		// 31 runs of other chains first: conv's first run ends where the
		// store's first chunk does (under -race, checkptr fails a walk that
		// so much as computes a pointer past it).
		{"a run ending at a chunk's end", append(fill(b, chunkBase/runLen-1), step{a, conv, 0, blocks}), blocks - 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ix, err := New(Config{BlockSize: 16})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tt.steps {
				if err := ix.Apply(s.src, store(s.src, s.h, s.lo, s.hi)); err != nil {
					t.Fatal(err)
				}
			}
			reached, finds, glided := walkTrace(ix, conv)
			if reached != blocks || finds != 1 || glided != tt.glided {
				t.Errorf("walk reached %d, looked up %d, glided %d; want %d, 1, %d", reached, finds, glided, blocks, tt.glided)
			}
		})
	}
}
