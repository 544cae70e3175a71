// This file holds what a rank's later events need from its earlier ones: KV-group kinds and salt chains.

package ingest

import "kvrouter/internal/kvevents"

// groupKinds learns a hybrid model's KV group kinds from its stores: vLLM's
// removals name their group only, and groups share block hashes, so a
// consumer that follows the full-attention group must tell another group's
// removal from its own (docs/wire.md §3.8). One per stream; not safe for concurrent
// use.
type groupKinds map[int]string

// Of returns the spec kind of ev's group ("" when unknown), learning it
// from a store that names it.
func (g *groupKinds) Of(ev *kvevents.Event) string {
	switch {
	case ev.Kind == kvevents.KindStored && ev.SpecKind != "":
		if *g == nil {
			*g = groupKinds{}
		}
		(*g)[ev.GroupIdx] = ev.SpecKind
	case ev.Kind == kvevents.KindRemoved && ev.SpecKind == "":
		return (*g)[ev.GroupIdx]
	}
	return ev.SpecKind
}

// saltChains carries a salted vLLM root's salt to the stores under it:
// vLLM names the salt in a prefix's first block only, and the router's
// identities carry it in every block (docs/wire.md §3.3). It maps the engine hash of
// each block under a salted root to the salt, for as long as any residency
// (tier and owner) still holds the block. One per stream (engine rank);
// not safe for concurrent use.
type saltChains map[uint64]saltedBlock

type saltedBlock struct {
	salt string
	held uint8 // one bit per tier and owner: see residency
}

// residency is the bit of an event's tier and owner: a block dropped from
// the GPU may still be held in host memory or by the runner, and a store
// under it there must still inherit its salt.
func residency(ev *kvevents.Event) uint8 {
	return 1 << (uint(ev.Tier&3) | uint(ev.Ownership&1)<<2)
}

// Inherit gives a store the salt of the chain it extends, and keeps the
// salted blocks in step with removals and clears.
func (c *saltChains) Inherit(ev *kvevents.Event) {
	switch ev.Kind {
	case kvevents.KindStored:
		if ev.CacheSalt == "" && ev.HasParent {
			ev.CacheSalt = (*c)[ev.ParentHash].salt
		}
		if ev.CacheSalt == "" {
			return
		}
		if *c == nil {
			*c = saltChains{}
		}
		bit := residency(ev)
		for _, h := range ev.BlockHashes {
			b := (*c)[h]
			if b.salt != ev.CacheSalt {
				// Another salt for the same hash: the engine reused
				// the hash, and the latest store speaks for it.
				b = saltedBlock{salt: ev.CacheSalt}
			}
			b.held |= bit
			(*c)[h] = b
		}
	case kvevents.KindRemoved:
		bit := residency(ev)
		for _, h := range ev.BlockHashes {
			b, ok := (*c)[h]
			if !ok {
				continue
			}
			if b.held &^= bit; b.held == 0 {
				delete(*c, h)
			} else {
				(*c)[h] = b
			}
		}
	case kvevents.KindCleared:
		*c = nil
	}
}

// ownerBits are the residency bits of runner-owned copies (see residency).
const ownerBits uint8 = 0xf0

// Drop forgets the residencies of the cache owner (owner) or of the worker
// (!owner), for a reset of that source alone: a block the other still
// holds keeps its salt for the stores under it.
func (c *saltChains) Drop(owner bool) {
	keep := ownerBits
	if owner {
		keep = ^ownerBits
	}
	for h, b := range *c {
		if b.held &= keep; b.held == 0 {
			delete(*c, h)
		} else {
			(*c)[h] = b
		}
	}
}
