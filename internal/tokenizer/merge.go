// This file holds the merge loop of BPE: a linear scan for short words, a heap for long ones.

package tokenizer

import "slices"

func (b *bpe) rule(x, y uint32) mergeRule {
	if r, ok := b.merges[pairKey(x, y)]; ok {
		return r
	}
	return mergeRule{rank: noRank}
}

// scanLimit is the word length up to which a linear scan for the best pair
// beats a heap.
const scanLimit = 48

// merge applies merges to syms until none applies: always the
// lowest-ranked pair, the leftmost among equals, which is the order of
// tokenizers' priority queue.
func (b *bpe) merge(syms []uint32, sc *scratch) []uint32 {
	if len(syms) < 2 || len(b.merges) == 0 {
		return syms
	}
	if len(syms) > scanLimit {
		return b.mergeHeap(syms, sc)
	}
	return b.mergeScan(syms, sc)
}

func (b *bpe) mergeScan(syms []uint32, sc *scratch) []uint32 {
	rules := sc.rules[:0]
	for i := 0; i+1 < len(syms); i++ {
		rules = append(rules, b.rule(syms[i], syms[i+1]))
	}
	for {
		best, rank := -1, uint32(noRank)
		for i := range rules {
			if rules[i].rank < rank {
				best, rank = i, rules[i].rank
			}
		}
		if best < 0 {
			break
		}
		syms[best] = rules[best].id
		syms = slices.Delete(syms, best+1, best+2)
		rules = slices.Delete(rules, best, best+1)
		if best > 0 {
			rules[best-1] = b.rule(syms[best-1], syms[best])
		}
		if best < len(rules) {
			rules[best] = b.rule(syms[best], syms[best+1])
		}
	}
	sc.rules = rules[:0]
	return syms
}

// mergeHeap is mergeScan for long words: symbols in a linked list and
// candidate pairs in a min-heap on (rank, position), stale candidates
// skipped when popped.
func (b *bpe) mergeHeap(syms []uint32, sc *scratch) []uint32 {
	n := len(syms)
	next := slices.Grow(sc.nextPos[:0], n)[:n]
	prev := slices.Grow(sc.prevPos[:0], n)[:n]
	for i := range n {
		prev[i], next[i] = int32(i-1), int32(i+1)
	}
	next[n-1] = -1
	h := candHeap(sc.heap[:0])
	for i := 0; i+1 < n; i++ {
		if r := b.rule(syms[i], syms[i+1]); r.rank != noRank {
			h = append(h, cand{rank: r.rank, pos: int32(i), left: syms[i], right: syms[i+1], id: r.id})
		}
	}
	h.init()
	for len(h) > 0 {
		c := h.pop()
		p := c.pos
		q := next[p]
		// A candidate is current only while both of its symbols are
		// unchanged; merged-away symbols are unlinked, so a dead position
		// never has its old neighbour.
		if q < 0 || syms[p] != c.left || syms[q] != c.right || prev[q] != p {
			continue
		}
		syms[p] = c.id
		next[p] = next[q]
		if next[q] >= 0 {
			prev[next[q]] = p
		}
		prev[q], next[q] = -2, -2 // dead
		if pp := prev[p]; pp >= 0 {
			if r := b.rule(syms[pp], syms[p]); r.rank != noRank {
				h.push(cand{rank: r.rank, pos: pp, left: syms[pp], right: syms[p], id: r.id})
			}
		}
		if nq := next[p]; nq >= 0 {
			if r := b.rule(syms[p], syms[nq]); r.rank != noRank {
				h.push(cand{rank: r.rank, pos: p, left: syms[p], right: syms[nq], id: r.id})
			}
		}
	}
	out := syms[:0]
	for i := int32(0); i >= 0; i = next[i] {
		out = append(out, syms[i])
	}
	sc.nextPos, sc.prevPos, sc.heap = next[:0], prev[:0], h[:0]
	return out
}

type cand struct {
	rank        uint32
	pos         int32
	left, right uint32
	id          uint32
}

func (c cand) less(d cand) bool {
	return c.rank < d.rank || c.rank == d.rank && c.pos < d.pos
}

// candHeap is a binary min-heap, written out to avoid container/heap's
// interface calls in the inner loop.
type candHeap []cand

func (h candHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *candHeap) push(c cand) {
	*h = append(*h, c)
	s := *h
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if !s[i].less(s[parent]) {
			break
		}
		s[i], s[parent] = s[parent], s[i]
		i = parent
	}
}

func (h *candHeap) pop() cand {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	*h = s[:last]
	h.down(0)
	return top
}

func (h candHeap) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h[r].less(h[l]) {
			m = r
		}
		if !h[m].less(h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}
