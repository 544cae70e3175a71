// This file holds the slot refs: what each source slot of an index stands for, relinked lazily.

package router

import (
	"sync"
	"sync/atomic"

	"kvrouter/internal/hints"
	"kvrouter/internal/index"
)

// A decision over a fleet of a thousand ranks gets a few hundred matches
// back from the index. Finding each one's rank or cache owner through the
// string-keyed tables cost as much as the match itself; instead the index's
// number for the source leads to its slot (slotCache), and the slot to what
// it is (slotRef).

// slotRef is what a source slot stands for: a worker's rank or a cache
// owner, with the ranks naming that owner as theirs.
type slotRef struct {
	e     *entry // a rank source: e.ranks[k]
	k     int
	o     *owner // a cache owner source
	owned []tie
}

// unlink marks the slot refs stale; the next decision relinks them. Callers
// hold mu for writing and call it whenever a slot, a worker's ranks or the
// owners change.
func (r *Router) unlink() { r.linked = false }

// relink rebuilds the slot refs. Callers hold mu for writing.
func (r *Router) relink() {
	if cap(r.refs) < len(r.slotSrc) {
		r.refs = make([]slotRef, len(r.slotSrc))
	}
	r.refs = r.refs[:len(r.slotSrc)]
	clear(r.refs)
	for _, e := range r.workers {
		for k, ref := range e.ranks {
			if r.valid(ref.slot, index.WorkerRank(e.w.ID, e.w.DPStart+k)) {
				r.refs[ref.slot] = slotRef{e: e, k: k}
			}
		}
	}
	for id, o := range r.owners {
		if r.valid(o.slot, index.CacheOwner(id)) {
			r.refs[o.slot] = slotRef{o: o, owned: r.ownerRanks[id]}
		}
	}
	if r.shapes == nil {
		r.shapes = map[string]shape{}
	}
	clear(r.shapes)
	for model, ents := range r.models {
		r.shapes[model] = shapeOf(ents, func(*entry) bool { return true })
	}
	r.linked = true
}

// shape is what a decision needs of a model's workers before it looks at
// any rank: a block size, whether others differ from it, and how many
// ranks there are. Kept per model, a decision without a filter does not
// load every worker's entry to learn it.
type shape struct {
	bs    int
	mixed bool
	ranks int
	// split: some worker has a prefill or decode role, so requests are
	// planned leg by leg (Plan).
	split bool
}

func shapeOf(ents []*entry, included func(*entry) bool) shape {
	var sh shape
	for _, e := range ents {
		if included(e) {
			if sh.bs == 0 {
				sh.bs = e.w.BlockSize
			}
			sh.mixed = sh.mixed || e.w.BlockSize != sh.bs
			sh.ranks += e.w.DPSize
			sh.split = sh.split || e.w.Role == hints.TypePrefill || e.w.Role == hints.TypeDecode
		}
	}
	return sh
}

func (r *Router) valid(slot int32, src index.Source) bool {
	return slot >= 0 && int(slot) < len(r.slotSrc) && r.slotSrc[slot] == src
}

// rlockLinked takes mu for reading with the slot refs current.
func (r *Router) rlockLinked() {
	r.mu.RLock()
	for !r.linked {
		r.mu.RUnlock()
		r.mu.Lock()
		if !r.linked {
			r.relink()
		}
		r.mu.Unlock()
		r.mu.RLock()
	}
}

// canonical returns src spelled with the router's own strings, so that
// the index keeps those (it keeps the first spelling it sees) and a match's
// source compared with the router's (hint selection, a slot looked up on
// a cache miss) finds equal pointers instead of comparing bytes. Callers
// hold mu.
func (r *Router) canonical(src index.Source) index.Source {
	if slot, ok := r.slots[src]; ok {
		return r.slotSrc[slot]
	}
	return src
}

// slotOf returns the slot of a match's source, -1 when it has none.
// Callers hold mu.
func (r *Router) slotOf(c *slotCache, m *index.Match) int32 {
	if slot, ok := c.get(m.ID, m.Gen); ok {
		return slot
	}
	slot, ok := r.slots[m.Source()]
	if !ok {
		return -1
	}
	c.put(m.ID, m.Gen, slot)
	return slot
}

// slotCache maps one index's source numbers to slots. Decisions fill it
// under the read lock, hence the atomics. An entry counts only for the
// source generation it was made for (index.Match.Gen), so a number the
// index gives to another source misses; a source whose slot the router
// frees is removed from its index first (dropSource), so its generation
// never matches again.
type slotCache struct {
	mu sync.Mutex                      // taken to grow
	t  atomic.Pointer[[]atomic.Uint64] // by number: gen<<32 | slot+1
}

func (c *slotCache) get(id, gen uint32) (int32, bool) {
	if c == nil {
		return -1, false
	}
	if t := c.t.Load(); t != nil && int(id) < len(*t) {
		if v := (*t)[id].Load(); v != 0 && uint32(v>>32) == gen {
			return int32(uint32(v)) - 1, true
		}
	}
	return -1, false
}

func (c *slotCache) put(id, gen uint32, slot int32) {
	if c == nil {
		return
	}
	t := c.t.Load()
	if t == nil || int(id) >= len(*t) {
		c.mu.Lock()
		if t = c.t.Load(); t == nil || int(id) >= len(*t) {
			grown := make([]atomic.Uint64, max(64, 2*int(id)+1))
			if t != nil {
				for i := range *t {
					grown[i].Store((*t)[i].Load())
				}
			}
			t = &grown
			c.t.Store(t)
		}
		c.mu.Unlock()
	}
	// A put racing a grow may land in the old table and be lost: it is a
	// cache.
	(*t)[id].Store(uint64(gen)<<32 | uint64(uint32(slot+1)))
}
