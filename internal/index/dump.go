// This file holds Dump and Held: the ops that rebuild one source's residency, and its counts.

package index

import (
	"cmp"
	"math/bits"
	"slices"

	"kvrouter/internal/kvevents"
)

// DumpChunk is the most blocks one op of a Dump carries, so that a
// transport can frame a large inventory.
const DumpChunk = 1024

// Dump returns ops that rebuild src's residency exactly when applied to an
// index where src holds nothing: one Store per tier and chunk, carrying
// identities and depths (Op.Seqs, Op.Depths) rather than parent links,
// because a source may hold a block whose parent it dropped. Blocks come in
// depth order within a tier. It serves the initial inventory of a late
// router and the resync after a gap.
func (ix *Index) Dump(src Source) []Op {
	type entry struct {
		seq, e uint64
		depth  uint32
		tiers  uint32
	}
	var ents []entry
	ix.eachHeld(src, func(seq, e uint64, depth, tiers uint32) {
		ents = append(ents, entry{seq, e, depth, tiers})
	})
	slices.SortFunc(ents, func(a, b entry) int {
		if c := cmp.Compare(a.depth, b.depth); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})

	var ops []Op
	for t := range numTiers {
		var op *Op
		for _, en := range ents {
			if en.tiers&(1<<t) == 0 {
				continue
			}
			if op == nil || len(op.Hashes) == DumpChunk {
				ops = append(ops, Op{Kind: OpStore, Tier: kvevents.Tier(t), Seqs: []uint64{}, Depths: []uint32{}})
				op = &ops[len(ops)-1]
			}
			op.Hashes = append(op.Hashes, en.e)
			op.Seqs = append(op.Seqs, en.seq)
			op.Depths = append(op.Depths, en.depth)
		}
	}
	if len(ops) > 0 && !ix.SaltKnown(src) {
		ops[0].SaltUnknown = true
	}
	return ops
}

// Held counts src's blocks by tier as Dump lists them (a block held on two
// tiers counts on each), without listing or sorting them: a router recounts
// every source on a ticker, and Dump spent most of that building ops.
func (ix *Index) Held(src Source) (n [NumTiers]int) {
	ix.eachHeld(src, func(_, _ uint64, _, tiers uint32) {
		for m := tiers; m != 0; m &= m - 1 {
			n[bits.TrailingZeros32(m)]++
		}
	})
	return n
}

// eachHeld calls f for every block src holds, with its depth and tier
// mask, holding src's lock throughout (its table does not change under f)
// and not the block's shard lock.
func (ix *Index) eachHeld(src Source, f func(seq, e uint64, depth, tiers uint32)) {
	s := ix.reg.lookup(src)
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, es := range s.engine.slots {
		if es.seq == 0 {
			continue
		}
		sh := &ix.shards[shardOf(es.seq)]
		sh.mu.RLock()
		pos, w, ok := sh.holds(es.seq, s.id, es.e)
		var depth uint32
		if ok {
			depth = sh.at(pos).depth()
		}
		sh.mu.RUnlock()
		if ok {
			f(es.seq, es.e, depth, w&tierMask)
		}
	}
}
