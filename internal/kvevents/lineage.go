package kvevents

// GroupKinds learns a hybrid model's KV group kinds from its stores: vLLM's
// removals name their group only, and groups share block hashes, so a
// consumer that follows the full-attention group must tell another group's
// removal from its own (SPEC 2.3). One per stream; not safe for concurrent
// use.
type GroupKinds map[int]string

// Of returns the spec kind of ev's group ("" when unknown), learning it
// from a store that names it.
func (g *GroupKinds) Of(ev *Event) string {
	switch {
	case ev.Kind == KindStored && ev.SpecKind != "":
		if *g == nil {
			*g = GroupKinds{}
		}
		(*g)[ev.GroupIdx] = ev.SpecKind
	case ev.Kind == KindRemoved && ev.SpecKind == "":
		return (*g)[ev.GroupIdx]
	}
	return ev.SpecKind
}

// SaltChains carries a salted vLLM root's salt to the stores under it:
// vLLM names the salt in a prefix's first block only, and the router's
// identities carry it in every block (SPEC 3.1). It maps the engine hash of
// each block under a salted root to the salt. One per stream (engine rank);
// not safe for concurrent use.
type SaltChains map[uint64]string

// Inherit gives a store the salt of the chain it extends, and keeps the
// salted blocks in step with removals and clears. A removal forgets the
// hash even if another tier still holds the block: a store under it then
// goes unsalted, which matches less but never across tenants.
func (c *SaltChains) Inherit(ev *Event) {
	switch ev.Kind {
	case KindStored:
		if ev.CacheSalt == "" && ev.HasParent {
			ev.CacheSalt = (*c)[ev.ParentHash]
		}
		if ev.CacheSalt == "" {
			return
		}
		if *c == nil {
			*c = SaltChains{}
		}
		for _, h := range ev.BlockHashes {
			(*c)[h] = ev.CacheSalt
		}
	case KindRemoved:
		for _, h := range ev.BlockHashes {
			delete(*c, h)
		}
	case KindCleared:
		*c = nil
	}
}
