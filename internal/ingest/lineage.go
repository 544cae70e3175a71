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
// (tier and owner) still holds the block.
//
// It also fails closed where the salt cannot be known: a runner-owned root
// store without extra_keys (a runner that reports keys and tokens only) may
// be any tenant's, and so may every runner-owned store under it. Such
// stores are marked SaltUnknown, unless another residency's store of the
// same hash (the engine's own, with its extra keys) told the salt: a hash
// has one salt, since the salt is hashed into it. One per stream (engine
// rank); not safe for concurrent use.
type saltChains map[uint64]saltedBlock

type saltedBlock struct {
	salt    string
	unknown bool  // no store of it told its salt, and a runner-owned one may have had one
	held    uint8 // one bit per tier and owner: see residency
}

// residency is the bit of an event's tier and owner: a block dropped from
// the GPU may still be held in host memory or by the runner, and a store
// under it there must still inherit its salt.
func residency(ev *kvevents.Event) uint8 {
	return 1 << (uint(ev.Tier&3) | uint(ev.Ownership&1)<<2)
}

// Inherit gives a store the salt of the chain it extends, or marks it
// SaltUnknown, and keeps the salted blocks in step with removals and
// clears.
func (c *saltChains) Inherit(ev *kvevents.Event) {
	switch ev.Kind {
	case kvevents.KindStored:
		runner := ev.Ownership == kvevents.OwnedByRunner
		switch {
		case ev.CacheSalt != "":
		case ev.HasParent:
			b := (*c)[ev.ParentHash]
			ev.CacheSalt = b.salt
			// Only the runner's own chains carry the doubt: the
			// engine's stores say their root's salt themselves.
			ev.SaltUnknown = b.unknown && runner
		case runner && !ev.ExtraKeys && len(ev.BlockHashes) > 0:
			if b, ok := (*c)[ev.BlockHashes[0]]; ok && b.salt != "" {
				ev.CacheSalt = b.salt // the engine's store of it said so
			} else {
				ev.SaltUnknown = true
			}
		}
		if ev.CacheSalt == "" && !ev.SaltUnknown {
			return
		}
		if *c == nil {
			*c = saltChains{}
		}
		bit := residency(ev)
		for _, h := range ev.BlockHashes {
			b := (*c)[h]
			switch {
			case ev.SaltUnknown && b.salt != "":
				// Known from another residency: keep it.
			case ev.SaltUnknown:
				b.unknown = true
			case b.salt != ev.CacheSalt:
				// Another salt for the same hash: the engine reused
				// the hash, and the latest store speaks for it.
				b = saltedBlock{salt: ev.CacheSalt, held: b.held}
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
