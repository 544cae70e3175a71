// This file holds the folding of a DP rank's TP-shard runner inventories into its cache owner's.

package ingest

import (
	"fmt"

	"kvrouter/internal/index"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvhash"
)

// aggregator folds the runner inventories of one DP rank's TP ranks into
// the inventory of the rank's cache owner (workerconfig.AggregateAllTPRanks).
// With TP > 1 each TP rank's runner holds only its shard of every block, and
// a peer pulling a block needs every shard, so a block is the owner's only
// while all TP ranks hold it on the same tier, and stops being the owner's
// at the first removal from any of them.
//
// Its output ops are what the owner source gains or loses. Stores come in
// the identity form of index.Dump (Seqs and Depths, no parent link): the
// parent of a block all ranks hold need not be held by all ranks, and the
// index accepts an identity-form store without its parent.
//
// It is pure state: no clock, no I/O, not safe for concurrent use.
type aggregator struct {
	held []map[uint64]uint8 // per TP rank: engine hash -> tier bits
	ids  map[uint64]blockID // engine hash -> identity, while any rank holds it
}

type blockID struct {
	seq   uint64
	depth uint32
}

// newAggregator returns an empty aggregator of tpRanks TP ranks.
func newAggregator(tpRanks int) *aggregator {
	a := &aggregator{held: make([]map[uint64]uint8, tpRanks), ids: map[uint64]blockID{}}
	for i := range a.held {
		a.held[i] = map[uint64]uint8{}
	}
	return a
}

// Ranks returns the number of TP ranks.
func (a *aggregator) Ranks() int { return len(a.held) }

// Reset forgets everything, for a stream reset: the owner source is cleared
// with it.
func (a *aggregator) Reset() {
	for i := range a.held {
		a.held[i] = map[uint64]uint8{}
	}
	a.ids = map[uint64]blockID{}
}

// Apply feeds one op of TP rank tp's runner and returns the owner's ops.
// A store naming a parent no rank holds cannot be given an identity: it is
// refused with index.ErrUnknownParent and changes nothing, like the
// index refuses it.
func (a *aggregator) Apply(tp int, op index.Op) ([]index.Op, error) {
	if tp < 0 || tp >= len(a.held) {
		return nil, fmt.Errorf("%w: TP rank %d of %d", index.ErrInvalidOp, tp, len(a.held))
	}
	if int(op.Tier) >= index.NumTiers {
		return nil, fmt.Errorf("%w: tier %d", index.ErrInvalidOp, op.Tier)
	}
	bit := uint8(1) << op.Tier
	switch op.Kind {
	case index.OpStore:
		return a.store(tp, op, bit)
	case index.OpRemove:
		var gone []uint64
		for _, e := range op.Hashes {
			if a.drop(tp, e, bit) {
				gone = append(gone, e)
			}
		}
		if len(gone) == 0 {
			return nil, nil
		}
		return []index.Op{{Kind: index.OpRemove, Tier: op.Tier, Hashes: gone}}, nil
	case index.OpClear:
		mask := bit
		if op.AllTiers {
			mask = 0xff
		}
		for e := range a.held[tp] {
			a.drop(tp, e, mask)
		}
		// Once one rank holds nothing on a tier, no block is on it for all
		// ranks: the owner loses exactly that tier, or everything.
		return []index.Op{{Kind: index.OpClear, Tier: op.Tier, AllTiers: op.AllTiers}}, nil
	}
	return nil, fmt.Errorf("%w: kind %d", index.ErrInvalidOp, op.Kind)
}

func (a *aggregator) store(tp int, op index.Op, bit uint8) ([]index.Op, error) {
	if op.Seqs != nil || len(op.Local) != len(op.Hashes) {
		return nil, fmt.Errorf("%w: a runner store needs one local hash per block", index.ErrInvalidOp)
	}
	var prev blockID
	if op.HasParent {
		p, ok := a.ids[op.Parent]
		if !ok {
			return nil, fmt.Errorf("%w: parent_block_hash %#x", index.ErrUnknownParent, op.Parent)
		}
		prev = p
	}
	var out []index.Op
	var add *index.Op
	for i, e := range op.Hashes {
		id := blockID{depth: prev.depth + 1}
		switch {
		case i == 0 && !op.HasParent:
			id = blockID{seq: op.Local[0]}
		default:
			id.seq = kvhash.SequenceHash(prev.seq, op.Local[i])
		}
		prev = id
		if old, ok := a.ids[e]; ok && old.seq != id.seq {
			// The engine hash now names another block (the last store wins,
			// as in the index): the other ranks' shards are of the old one.
			out = append(out, a.remap(e)...)
			add = nil // keep the removals before later stores
		}
		a.ids[e] = id
		if a.held[tp][e]&bit != 0 {
			continue
		}
		a.held[tp][e] |= bit
		if !a.allHold(e, bit) {
			continue
		}
		if add == nil {
			out = append(out, index.Op{Kind: index.OpStore, Tier: op.Tier, BlockSize: op.BlockSize, Seqs: []uint64{}, Depths: []uint32{}})
			add = &out[len(out)-1]
		}
		add.Hashes = append(add.Hashes, e)
		add.Seqs = append(add.Seqs, id.seq)
		add.Depths = append(add.Depths, id.depth)
	}
	return out, nil
}

// remap forgets every rank's holding of engine hash e (rank tp is about to
// hold it anew), returning the removals of the tiers on which all ranks held
// the old block.
func (a *aggregator) remap(e uint64) []index.Op {
	var out []index.Op
	for t := range index.NumTiers {
		bit := uint8(1) << t
		if a.allHold(e, bit) {
			out = append(out, index.Op{Kind: index.OpRemove, Tier: kvevents.Tier(t), Hashes: []uint64{e}})
		}
	}
	for _, h := range a.held {
		delete(h, e)
	}
	return out
}

// drop clears the tier bits mask of e on rank tp and reports whether e was
// held by all ranks on the (single) tier bit before; identities no rank
// holds anymore are forgotten.
func (a *aggregator) drop(tp int, e uint64, mask uint8) bool {
	have, ok := a.held[tp][e]
	if !ok || have&mask == 0 {
		return false
	}
	was := a.allHold(e, mask)
	if have &^= mask; have == 0 {
		delete(a.held[tp], e)
		a.forgetIfUnheld(e)
	} else {
		a.held[tp][e] = have
	}
	return was
}

func (a *aggregator) forgetIfUnheld(e uint64) {
	for _, h := range a.held {
		if _, ok := h[e]; ok {
			return
		}
	}
	delete(a.ids, e)
}

// allHold reports whether every rank holds e on one of the tier bits (a
// single bit for stores and removals).
func (a *aggregator) allHold(e uint64, bit uint8) bool {
	for _, h := range a.held {
		if h[e]&bit == 0 {
			return false
		}
	}
	return true
}

// Len returns the number of blocks some rank holds, for tests and metrics.
func (a *aggregator) Len() int { return len(a.ids) }
