// This file holds the pricing of ranks: their loads, the cheapest ranks, and draws among ties.

package router

import (
	"math"
	"math/rand/v2"
	"slices"

	"kvrouter/internal/cost"
)

// loads is a decision's working memory, pooled: the in-flight load of every
// rank by slot, read from the tracker in one go (a lock and a map lookup
// per rank cost more than the rest of a decision over a thousand ranks;
// by starts and ends all zero), and the priced candidates. Nothing in a
// Decision points into it.
type loads struct {
	by       []cost.RankLoad // by slot
	set      []int32         // slots set in by
	inflight []rankLoad
	scored   []cost.Scored
	of       []*group // by scored candidate, with several block sizes
	ties     []tie
	hit      []tie    // the ranks with work in flight
	keys     []uint64 // draw's
	mark     []uint32 // by rank slot: gen when the rank was priced
	gen      uint32
}

type rankLoad struct {
	rank cost.Rank
	load cost.RankLoad
}

// readLoads fills a loads from the tracker. Callers hold mu.
func (r *Router) readLoads() *loads {
	l, _ := r.loads.Get().(*loads)
	if l == nil {
		l = &loads{}
	}
	if len(l.by) < len(r.slotSrc) {
		l.by = make([]cost.RankLoad, len(r.slotSrc))
	}
	// Copied out first: the tracker's lock is not held over map lookups.
	r.load.Each(func(k cost.Rank, rl cost.RankLoad) {
		l.inflight = append(l.inflight, rankLoad{k, rl})
	})
	for _, f := range l.inflight {
		if e := r.workers[f.rank.Worker]; e != nil && e.w.HasRank(f.rank.DP) {
			k := f.rank.DP - e.w.DPStart
			l.by[e.ranks[k].slot] = f.load
			l.set = append(l.set, e.ranks[k].slot)
			l.hit = append(l.hit, tie{e, k, e.ranks[k].slot})
		}
	}
	return l
}

func (r *Router) releaseLoads(l *loads) {
	for _, slot := range l.set {
		l.by[slot] = cost.RankLoad{}
	}
	l.set, l.inflight = l.set[:0], l.inflight[:0]
	clear(l.of) // keeps no group or entry alive
	clear(l.ties)
	clear(l.hit)
	l.of, l.ties, l.hit = l.of[:0], l.ties[:0], l.hit[:0]
	r.loads.Put(l)
}

// cheapest is cost.Choose at temperature 0 over the ranks of the
// included workers, all of g's block size, without materialising them: a
// decision over a thousand ranks spent most of its time writing and
// re-reading candidates only to keep one. It prices each rank as it goes
// and keeps the cheapest, with the same ties (smaller tree, then the
// content-seeded draw) in the same order as the full list would have. It
// returns a nil entry when no rank is included.
func (r *Router) cheapest(g *group, ents []*entry, ranks int, included func(*entry) bool, ld *loads, req Request) (*entry, int) {
	if e, i, ok := r.cheapestWarm(g, ranks, included, ld, req); ok {
		return e, i
	}
	b := best{ties: ld.ties[:0]}
	filtered := req.filtered() || r.down.Load() > 0
	w := r.weightsFor(&req)
	var c cost.Candidate
	for _, e := range ents {
		if filtered && !included(e) {
			continue
		}
		for i := range e.w.DPSize {
			r.fill(&c, g, e, i, ld)
			b.offer(w.Cost(len(g.local), g.bs, &c), c.TreeSize, tie{e: e, i: i})
		}
	}
	ld.ties = b.ties
	if len(b.ties) == 0 {
		// Every rank left since the shape was taken (a worker went
		// down meanwhile).
		return nil, 0
	}
	pick := b.ties[0]
	if len(b.ties) > 1 {
		pick = b.ties[rand.New(rand.NewPCG(contentSeed(req, []*group{g}))).IntN(len(b.ties))]
	}
	return pick.e, pick.i
}

// cheapestWarm is cheapest when a rank that holds some of the prompt or has
// work in flight (a warm rank) is strictly cheaper than a cold one: every
// cold rank costs the same, so the choice is among the warm ranks alone and
// a decision over a thousand ranks prices a few dozen. ok is false when a
// cold rank could be among the cheapest (or engines report load, which
// warms every rank): then all must be priced in order.
//
// Of the warm ranks, those with work in flight are priced first; the others
// cost no less than the floor of the deepest match that warms them
// (cost.Weights.Floor), and the matches come deepest first. So once a
// match's floor is above the cheapest rank found, neither its ranks nor any
// after it can be among the cheapest, and they are left unpriced: when one
// rank holds a conversation that a hundred others share only the system
// prompt of, the hundred are skipped.
func (r *Router) cheapestWarm(g *group, ranks int, included func(*entry) bool, ld *loads, req Request) (*entry, int, bool) {
	if len(r.engine) > 0 || 2*(len(g.matches)+len(ld.hit)) > ranks {
		// Most ranks are warm: walking them all in order is cheaper.
		return nil, 0, false
	}
	w := r.weightsFor(&req)
	blocks := len(g.local)
	cold := w.Cost(blocks, g.bs, &cost.Candidate{})
	if len(ld.mark) < len(r.slotSrc) {
		ld.mark = make([]uint32, len(r.slotSrc))
	}
	if ld.gen++; ld.gen == 0 { // wrapped: old marks could look current
		clear(ld.mark)
		ld.gen = 1
	}
	filtered := req.filtered() || r.down.Load() > 0
	b := best{ties: ld.ties[:0]}
	var c cost.Candidate
	price := func(h tie) {
		if ld.mark[h.slot] == ld.gen || (filtered && !included(h.e)) {
			return
		}
		ld.mark[h.slot] = ld.gen
		r.fill(&c, g, h.e, h.i, ld)
		b.offer(w.Cost(blocks, g.bs, &c), c.TreeSize, h)
	}
	for _, h := range ld.hit {
		price(h)
	}
	_, bounded := w.Floor(blocks, 0)
	depth := -1
	for i, slot := range g.slots {
		if slot < 0 {
			continue
		}
		if d := int(g.matches[i].Depth); bounded && len(b.ties) > 0 && d != depth {
			depth = d
			// Skipped only when clear of rounding: a rank costing
			// exactly the cheapest is a tie and must be drawn among.
			if floor, _ := w.Floor(blocks, d); floor > b.lo+1e-9*(1+math.Abs(b.lo)) {
				break
			}
		}
		// A rank is warm through its own source's match or through the
		// match of the cache owner it names.
		switch ref := &r.refs[slot]; {
		case ref.e != nil:
			price(tie{ref.e, ref.k, slot})
		case ref.o != nil:
			for _, t := range ref.owned { // most owners have one rank
				price(t)
			}
		}
	}
	ld.ties = b.ties
	if len(b.ties) == 0 || b.lo >= cold {
		return nil, 0, false
	}
	pick := b.ties[0]
	if len(b.ties) > 1 {
		pick = ld.draw(b.ties, rand.New(rand.NewPCG(contentSeed(req, []*group{g}))).IntN(len(b.ties)))
	}
	return pick.e, pick.i, true
}

// draw returns the k-th of ties in the order the full list has them (by
// entry, then rank). A new conversation ties a hundred ranks sharing its
// system prompt: their places are sorted as plain integers, each carrying
// its tie's index, rather than the ties through their entries.
func (ld *loads) draw(ties []tie, k int) tie {
	const bits = 21 // ties and ranks per worker below 2^21, entries below 2^22
	keys := ld.keys[:0]
	for j, t := range ties {
		if t.e.pos >= 1<<(64-2*bits) || t.i >= 1<<bits || j >= 1<<bits {
			// Past what a key holds: sort the ties themselves.
			slices.SortFunc(ties, func(a, b tie) int {
				if a.e != b.e {
					return a.e.pos - b.e.pos
				}
				return a.i - b.i
			})
			return ties[k]
		}
		keys = append(keys, uint64(t.e.pos)<<(2*bits)|uint64(t.i)<<bits|uint64(j))
	}
	slices.Sort(keys)
	ld.keys = keys
	return ties[keys[k]&(1<<bits-1)]
}

// best keeps the cheapest ranks offered so far: the lowest cost, and of
// those the smallest tree, all tied ranks in the order offered.
type best struct {
	ties []tie
	lo   float64
	tree int
}

func (b *best) offer(cost float64, tree int, h tie) {
	switch {
	case len(b.ties) == 0 || cost < b.lo:
		b.lo, b.tree, b.ties = cost, tree, append(b.ties[:0], h)
	case cost != b.lo || tree > b.tree:
	case tree < b.tree:
		b.tree, b.ties = tree, append(b.ties[:0], h)
	default:
		b.ties = append(b.ties, h)
	}
}

// tie is a rank among the cheapest so far, or a warm one to price.
type tie struct {
	e *entry
	i int
	// slot is e.ranks[i].slot where the tie was made with it at hand: a
	// warm rank already seen is then skipped without loading its entry.
	slot int32
}
