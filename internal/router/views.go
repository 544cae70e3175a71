// This file holds the router's views for /debug/workers and its counts for metrics.

package router

import (
	"cmp"
	"slices"
	"time"

	"kvrouter/internal/cost"
	"kvrouter/internal/index"
)

// Blocks counts a source's blocks per tier, indexed by kvevents.Tier.
type Blocks [index.NumTiers]int

// RankView is one rank as /debug/workers shows it.
type RankView struct {
	Rank     int
	Endpoint string
	// Ready says the rank may name a hint source: its stream is in step
	// and the worker is not down.
	Ready  bool
	Blocks Blocks
	Load   cost.RankLoad
	Engine *EngineLoad
}

// OwnerView is one cache owner.
type OwnerView struct {
	ID        string
	Worker    string // "" when detached
	Rank      int    // -1 when no registration names it
	Ready     bool
	Detached  bool
	ExpiresAt time.Time // detached owners only
	Blocks    Blocks
}

// WorkerView is one worker with its ranks and owners.
type WorkerView struct {
	Worker
	Trusted bool // its registration is backed by a live discovery watch
	Health  Health
	Ranks   []RankView
	Owners  []OwnerView
}

// Stats sum up the router's state for metrics.
type Stats struct {
	WorkersByMode  map[Mode]int
	WorkersDown    int // of those, marked down
	Sources        int
	NotReady       int // sources that may not name a hint source now
	DetachedOwners int
	BlocksByTier   Blocks // from the last RefreshSizes
	DiscoveryLive  bool
}

// View returns every worker and every detached owner, sorted by id. Block
// counts are those of the last RefreshSizes.
func (r *Router) View() ([]WorkerView, []OwnerView) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	ws := make([]WorkerView, 0, len(r.workers))
	for _, e := range r.workers {
		w := e.w
		v := WorkerView{Worker: w, Trusted: r.trusted(w.Origin), Health: r.healthOf(e)}
		for rank := w.DPStart; rank < w.DPStart+w.DPSize; rank++ {
			src := index.WorkerRank(w.ID, rank)
			rv := RankView{Rank: rank, Endpoint: w.Capability.Endpoints[rank], Ready: r.ready[src] && !v.Health.Down,
				Blocks: r.sizes[src], Load: r.load.Of(cost.Rank{Worker: w.ID, DP: rank})}
			if el, ok := r.engine[cost.Rank{Worker: w.ID, DP: rank}]; ok {
				rv.Engine = &el
			}
			v.Ranks = append(v.Ranks, rv)
		}
		ws = append(ws, v)
	}
	var detached []OwnerView
	for id, o := range r.owners {
		ov := OwnerView{ID: id, Worker: o.worker, Rank: o.rank, Ready: r.ready[index.CacheOwner(id)],
			Detached: o.worker == "", Blocks: r.sizes[index.CacheOwner(id)]}
		if ov.Detached {
			ov.Ready, ov.ExpiresAt = o.meta.Ready, o.until
			detached = append(detached, ov)
			continue
		}
		for i := range ws {
			if ws[i].ID == o.worker {
				ws[i].Owners = append(ws[i].Owners, ov)
			}
		}
	}
	slices.SortFunc(ws, func(a, b WorkerView) int { return cmp.Compare(a.ID, b.ID) })
	for i := range ws {
		slices.SortFunc(ws[i].Owners, func(a, b OwnerView) int { return cmp.Compare(a.ID, b.ID) })
	}
	slices.SortFunc(detached, func(a, b OwnerView) int { return cmp.Compare(a.ID, b.ID) })
	return ws, detached
}

// Stats returns counts for metrics.
func (r *Router) Stats() Stats {
	r.mu.RLock()
	defer r.mu.RUnlock()
	st := Stats{WorkersByMode: map[Mode]int{ModeEvents: 0, ModeApproximate: 0}, DiscoveryLive: r.live}
	for _, e := range r.workers {
		st.WorkersByMode[e.w.Mode]++
		if e.down.Load() {
			st.WorkersDown++
		}
	}
	for src, ready := range r.ready {
		st.Sources++
		origin := OriginFlag
		if src.IsOwner() {
			if o := r.owners[src.Owner]; o != nil {
				origin = o.origin
				if o.worker == "" {
					st.DetachedOwners++
					ready = o.meta.Ready
				}
			}
		} else if e := r.workers[src.Worker]; e != nil {
			origin = e.w.Origin
			if e.w.Mode == ModeApproximate {
				st.Sources--
				continue
			}
			ready = ready && !e.down.Load()
		}
		if !ready || !r.trusted(origin) {
			st.NotReady++
		}
	}
	for _, b := range r.sizes {
		for t, n := range b {
			st.BlocksByTier[t] += n
		}
	}
	return st
}

// RefreshSizes recounts every source's blocks per tier, which tie-breaking
// (the smaller cache wins) and the views use. It walks the whole index, so
// a service calls it on a slow ticker, not per request.
func (r *Router) RefreshSizes() {
	r.mu.RLock()
	srcs := make([]index.Source, 0, len(r.ready))
	for src := range r.ready {
		srcs = append(srcs, src)
	}
	r.mu.RUnlock()
	sizes := make(map[index.Source]Blocks, len(srcs))
	for _, src := range srcs {
		ix, ok := r.set.IndexOf(src)
		if !ok {
			continue
		}
		sizes[src] = Blocks(ix.Held(src))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for src, b := range sizes {
		if _, ok := r.ready[src]; ok {
			r.sizes[src] = b
		}
		if slot, ok := r.slots[src]; ok {
			n := 0
			for _, c := range b {
				n += c
			}
			r.tree[slot] = int32(min(n, 1<<31-1))
		}
	}
}
