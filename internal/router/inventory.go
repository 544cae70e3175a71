// This file holds Inventory: every source's blocks as the index holds them, for checks against the engines' ground truth.
package router

import (
	"slices"

	"kvrouter/internal/index"
	"kvrouter/internal/kvevents"
)

// SourceInventory is what the index holds for one source.
type SourceInventory struct {
	Source index.Source
	// Worker is the rank's worker, or the owner's ("" when detached).
	Worker string
	// Ready says the source may name a hint source.
	Ready bool
	// Approximate: the worker's blocks are the router's guesses, not
	// what its engine reported.
	Approximate bool
	// Tiers lists the engine block hashes held per tier, sorted.
	Tiers map[kvevents.Tier][]uint64
}

// Inventory lists the blocks of every source, sorted by source. It walks
// each source's whole inventory: for checks and operators, not for the
// request path.
func (r *Router) Inventory() []SourceInventory {
	r.mu.RLock()
	out := make([]SourceInventory, 0, len(r.ready))
	for src, ready := range r.ready {
		si := SourceInventory{Source: src, Ready: ready}
		if src.IsOwner() {
			if o := r.owners[src.Owner]; o != nil {
				si.Worker = o.worker
			}
		} else if e := r.workers[src.Worker]; e != nil {
			si.Worker = src.Worker
			si.Approximate = e.w.Mode == ModeApproximate
			si.Ready = ready && !e.down.Load()
		}
		out = append(out, si)
	}
	r.mu.RUnlock()
	for i := range out {
		out[i].Tiers = map[kvevents.Tier][]uint64{}
		ix, ok := r.set.IndexOf(out[i].Source)
		if !ok {
			continue
		}
		for _, op := range ix.Dump(out[i].Source) {
			out[i].Tiers[op.Tier] = append(out[i].Tiers[op.Tier], op.Hashes...)
		}
		for t := range out[i].Tiers {
			slices.Sort(out[i].Tiers[t])
		}
	}
	slices.SortFunc(out, func(a, b SourceInventory) int { return a.Source.Compare(b.Source) })
	return out
}

// Ident says the identity and depth of the block src, one of the sink's
// worker's sources, holds under engine hash e (index.Index.Ident).
func (s *Sink) Ident(src index.Source, e uint64) (seq uint64, depth uint32, ok bool) {
	s.r.mu.RLock()
	current := s.current(src, false)
	s.r.mu.RUnlock()
	if !current {
		return 0, 0, false
	}
	ix, ok := s.r.set.IndexOf(src)
	if !ok {
		return 0, 0, false
	}
	return ix.Ident(src, e)
}
