// This file holds Match: every source's overlap with a request, and the scratch it works in.

package index

import (
	"math/bits"
	"slices"
)

// MatchOptions tunes Match.
type MatchOptions struct {
	// Chains asks for each source's retained engine hashes of its matched
	// blocks, to build a hint.
	Chains bool
}

// Match is one source's overlap with a request. It is a cache line: a
// decision over a fleet gets hundreds.
type Match struct {
	// src points into the id table the match read, which is never
	// written once published.
	src *Source
	// ID is the index's number for the source: no two sources the index
	// holds at once share one, and a source keeps its number until it is
	// removed (then the number may go to another). Callers key tables of
	// their own by it rather than hash the Source.
	ID uint32
	// Gen tells apart the sources that held ID over time: (ID, Gen) names
	// one source (until 2^32 registrations wrap it), so a table keyed by
	// ID is checked by Gen, without comparing Sources.
	Gen uint32
	// Depth is the number of blocks from the root the source holds
	// contiguously, on any tier.
	Depth int32
	// DeviceDepth is the contiguous prefix held on the device tier.
	DeviceDepth int32
	// Tiers counts blocks [0, Depth) by the fastest tier holding them, so
	// they sum to Depth; Tiers[TierHost] etc. are the lower-tier blocks
	// that extend the device prefix.
	Tiers [NumTiers]int32
	// Chain, with MatchOptions.Chains, is the source's own engine hashes
	// for blocks [0, Depth). Chains of sources that agree share memory:
	// do not append to one.
	Chain []uint64
}

// Source is the source that matched.
func (m *Match) Source() Source {
	if m.src == nil {
		return Source{}
	}
	return *m.src
}

// Match returns, for every source holding at least the request's first
// block, its overlap with the request given by its local hashes, ordered
// by Depth, deepest first (ties in no particular order). It stops walking
// the request once no source extends the prefix, having hashed at most
// three windows of blocks ahead and predicted at most two.
func (ix *Index) Match(local []uint64, opts MatchOptions) []Match {
	return ix.AppendMatch(nil, local, opts)
}

// AppendMatch is Match appending to dst, to reuse its memory. Chains are
// allocated afresh (MatchInto reuses theirs too).
func (ix *Index) AppendMatch(dst []Match, local []uint64, opts MatchOptions) []Match {
	dst, _ = ix.appendMatch(dst, local, opts, nil)
	return dst
}

// Matches is a match's results with the memory they use, to reuse both:
// MatchInto overwrites the previous results, their chains included, so a
// caller keeps nothing of them past its next call.
type Matches struct {
	List   []Match
	chains []uint64 // the chain of the sources that agree
}

// MatchInto is Match writing its results to ms.List. With Chains, it
// reuses the memory of the previous results' chains: a fresh 1 KiB chain
// a match sent one match in eight to refill the allocator's cache, and
// put the bench's 16-source p99 at 13.5 µs rather than 8.7 (medians of
// 8 alternating runs of kvrouter bench index).
func (ix *Index) MatchInto(ms *Matches, local []uint64, opts MatchOptions) {
	ms.List, ms.chains = ix.appendMatch(ms.List[:0], local, opts, ms.chains)
}

// appendMatch appends the results to dst and returns them with the memory
// of the agreeing chain: mem's when it has room.
func (ix *Index) appendMatch(dst []Match, local []uint64, opts MatchOptions, mem []uint64) ([]Match, []uint64) {
	if len(local) == 0 {
		return dst, mem
	}
	tbl := ix.reg.table()
	sc := ix.scratch.Get().(*scratch)
	defer ix.scratch.Put(sc)
	sc.reset(len(tbl.srcs), opts.Chains, len(local), mem)
	if ix.maxBlocks > 0 || ix.maxBytes > 0 {
		sc.now = ix.tick()
	}
	sc.prefetchLocal(local)
	// The walk holds the read locks of every shard, each taken once, in
	// ascending order (writers hold one shard lock at a time, so readers
	// holding several cannot deadlock with them): it reads nodes where it
	// predicts them, and a predicted slot may hold any shard's node.
	ix.rlockShards()
	reached := ix.walk(sc, local)
	ix.runlockShards()
	// The pooled scratch keeps no node pointers between matches.
	clear(sc.segs)
	sc.segs = sc.segs[:0]
	dst = sc.results(dst, tbl, uint32(reached))
	if opts.Chains {
		mem = sc.primary
		sc.primary = nil // the caller's now
	}
	return dst, mem
}

// scratch is a Match's working memory, pooled.
type scratch struct {
	gen        uint32
	st         []srcState
	alive      int
	now        uint32   // recency epoch to stamp on the nodes walked, 0: none
	seqs       []uint64 // the blocks' identities, hashed so far
	segs       []seg    // where the blocks' nodes likely are (extend, check)
	frontier   int      // blocks predicted so far
	finds      int      // blocks walk looked up, not found where predicted
	glided     int      // blocks walk took in glide
	addrs      []uintptr
	chainAddrs []uintptr
	inline     [inlineMax]uint32 // holders of an inline node, for this block
	prevInline [inlineMax]uint32 // and for the last, when prev was inline
	abuf       []altHolder       // alt holders of a block
	prev       []uint32          // holders of the previous block
	prevDense  bool
	prevFP     uint64 // fingerprint of prev, when dense
	tmp        []uint32
	convA      []uint32 // holder words turned into tier-mask words
	convB      []uint32
	cands      []uint32
	chains     bool
	primary    []uint64
	private    [][]uint64
	privIDs    []uint32
	buckets    []int32
	sorted     []uint32
	cohort     []uint32 // implicit members' tier masks, dense (see start)
	left       []left   // cohort members that left, in walk order
}

func (sc *scratch) reset(nsrc int, chains bool, n int, mem []uint64) {
	sc.gen++
	if sc.gen == 0 { // wrapped: stale states could look current
		clear(sc.st)
		sc.gen = 1
	}
	if len(sc.st) < nsrc {
		sc.st = append(sc.st, make([]srcState, nsrc-len(sc.st))...)
	}
	sc.alive, sc.now, sc.seqs = 0, 0, sc.seqs[:0]
	sc.finds, sc.glided = 0, 0
	if cap(sc.seqs) < n {
		sc.seqs = make([]uint64, 0, n)
	}
	sc.prev, sc.prevDense, sc.cands = nil, false, sc.cands[:0]
	sc.cohort, sc.left = sc.cohort[:0], sc.left[:0]
	sc.chains = chains
	sc.primary, sc.private, sc.privIDs = nil, sc.private[:0], sc.privIDs[:0]
	if chains {
		// The caller's memory, or fresh: results keep slices of it.
		sc.primary = mem[:0]
		if cap(mem) < n {
			sc.primary = make([]uint64, 0, n)
		}
	}
}

// state returns the state of a source still matching, materializing an
// implicit cohort member's; nil for any other.
func (sc *scratch) state(id uint32) *srcState {
	if int(id) >= len(sc.st) {
		return nil // registered after this Match began
	}
	st := &sc.st[id]
	if st.gen == sc.gen {
		if !st.alive {
			return nil
		}
		return st
	}
	if len(sc.cohort) == 0 {
		return nil
	}
	return sc.materialize(id)
}

// materialize gives implicit cohort member id a state, nil if id is none.
func (sc *scratch) materialize(id uint32) *srcState {
	m := sc.implicit(id)
	if m == 0 {
		return nil
	}
	// Counted alive since start; it held every block so far on m's tiers.
	sc.unmark(id)
	st := &sc.st[id]
	*st = srcState{gen: sc.gen, alive: true, mask: m, devDone: m&1 == 0}
	sc.cands = append(sc.cands, id)
	return st
}

// alts returns the holders of n whose engine hash is not n.engine (none
// unless metaAlt).
func (sc *scratch) alts(sh *shard, n *node) []altHolder {
	if n.meta&metaAlt == 0 {
		return nil
	}
	sc.tmp = sh.appendHolders(sc.tmp[:0], n)
	ab := sc.abuf[:0]
	for _, w := range sc.tmp {
		if w&altBit != 0 {
			ab = append(ab, altHolder{w >> idShift, sh.alt[altKey{n.seq, w >> idShift}]})
		}
	}
	sc.abuf = ab
	return ab
}

// extendChains appends block i's engine hash to every live chain. Sources
// agreeing with node.engine all along share the primary chain; one that
// disagrees once gets a private copy.
func (sc *scratch) extendChains(i int, engine uint64, alts []altHolder) {
	sc.primary = append(sc.primary, engine)
	for _, a := range alts {
		st := sc.state(a.id)
		if st == nil {
			continue
		}
		if st.chain == 0 {
			c := make([]uint64, i, len(sc.primary)+8)
			copy(c, sc.primary[:i])
			sc.private = append(sc.private, c)
			sc.privIDs = append(sc.privIDs, a.id)
			st.chain = int32(len(sc.private))
		}
		sc.private[st.chain-1] = append(sc.private[st.chain-1], a.e)
	}
	for _, id := range sc.privIDs {
		if st := sc.state(id); st != nil && len(sc.private[st.chain-1]) == i {
			sc.private[st.chain-1] = append(sc.private[st.chain-1], engine)
		}
	}
}

// results closes the live runs at reached and appends one Match per
// candidate, deepest first.
func (sc *scratch) results(dst []Match, tbl *idTable, reached uint32) []Match {
	kept := sc.cands[:0]
	for _, id := range sc.cands {
		if st := &sc.st[id]; st.alive {
			st.end(reached)
		}
		if tbl.holds(id) { // else removed while we matched
			kept = append(kept, id)
		}
	}
	if len(kept) > sortAt {
		kept = sc.byDepth(kept, reached)
	} else {
		for a := 1; a < len(kept); a++ {
			for b := a; b > 0 && sc.st[kept[b]].depth > sc.st[kept[b-1]].depth; b-- {
				kept[b], kept[b-1] = kept[b-1], kept[b]
			}
		}
	}
	if len(sc.cohort) > 0 || len(sc.left) > 0 {
		return sc.mergeResults(dst, tbl, reached, kept)
	}
	base := len(dst)
	dst = append(dst, make([]Match, len(kept))...)
	for k, id := range kept {
		sc.result(&dst[base+k], tbl, id)
	}
	return dst
}

// result fills m with the result of source id, which has a state.
func (sc *scratch) result(m *Match, tbl *idTable, id uint32) {
	st := &sc.st[id]
	m.src, m.ID, m.Gen = &tbl.keys[id], id, tbl.gens[id]
	m.Depth = int32(st.depth)
	m.DeviceDepth = int32(st.dev)
	for t := range numTiers {
		m.Tiers[t] = int32(st.tiers[t])
	}
	if sc.chains {
		if st.chain == 0 {
			m.Chain = sc.primary[:st.depth:st.depth]
		} else {
			c := sc.private[st.chain-1]
			m.Chain = c[:st.depth:st.depth]
		}
	}
}

// mergeResults is results when a cohort began the match: its members still
// matching (all reached), the sources with states (kept, deepest first)
// and the members that left (in walk order, so shallowest last), merged.
func (sc *scratch) mergeResults(dst []Match, tbl *idTable, reached uint32, kept []uint32) []Match {
	// Room for every result first: each is then written in place, with
	// dst's length in a register rather than in a closure's context.
	dst = slices.Grow(dst, len(sc.cohort)*nibbles+len(sc.left)+len(kept))
	n := len(dst)
	dst = dst[:cap(dst)]
	member := func(n int, id, depth, mask uint32) int {
		if !tbl.holds(id) {
			return n // removed while we matched
		}
		m := &dst[n]
		m.src, m.ID, m.Gen = &tbl.keys[id], id, tbl.gens[id]
		m.Depth, m.DeviceDepth = int32(depth), int32(depth&-(mask&1))
		m.Tiers = [NumTiers]int32{}
		m.Tiers[bits.TrailingZeros32(mask)] = int32(depth)
		m.Chain = nil
		if sc.chains {
			m.Chain = sc.primary[:depth:depth] // a member never disagreed
		}
		return n + 1
	}
	for k, w := range sc.cohort {
		for ; w != 0; w &^= tierMask << (4 * (uint32(bits.TrailingZeros32(w)) / 4)) {
			j := uint32(bits.TrailingZeros32(w)) / 4
			n = member(n, uint32(k)*nibbles+j, reached, w>>(4*j)&tierMask)
		}
	}
	l := len(sc.left)
	for _, id := range kept {
		for ; l > 0 && sc.left[l-1].at > sc.st[id].depth; l-- {
			g := &sc.left[l-1]
			n = member(n, g.id, g.at, g.mask)
		}
		dst[n] = Match{}
		sc.result(&dst[n], tbl, id)
		n++
	}
	for ; l > 0; l-- {
		g := &sc.left[l-1]
		n = member(n, g.id, g.at, g.mask)
	}
	return dst[:n]
}

// sortAt is the number of candidates past which results sorts them by
// counting (depths are small integers) rather than by insertion: below it,
// clearing and summing a count per depth costs more.
const sortAt = 32

// byDepth returns ids ordered by depth, deepest first, by counting.
func (sc *scratch) byDepth(ids []uint32, reached uint32) []uint32 {
	if cap(sc.buckets) < int(reached)+2 {
		sc.buckets = make([]int32, reached+2)
	}
	buckets := sc.buckets[:reached+2]
	clear(buckets)
	for _, id := range ids {
		buckets[reached-sc.st[id].depth+1]++
	}
	for d := 1; d < len(buckets); d++ {
		buckets[d] += buckets[d-1]
	}
	out := append(sc.sorted[:0], ids...)
	for _, id := range ids {
		k := &buckets[reached-sc.st[id].depth]
		out[*k] = id
		*k++
	}
	sc.sorted = out
	return out
}

// tick advances the logical clock for one Match and returns its epoch.
func (ix *Index) tick() uint32 {
	e := (ix.clock.Add(1) - ix.base.Load()) >> epochShift
	if e >= rebaseAt {
		ix.rebase()
		e = (ix.clock.Load() - ix.base.Load()) >> epochShift
	}
	return uint32(e)
}

// epoch returns the current recency epoch.
func (ix *Index) epoch() uint32 {
	return uint32((ix.clock.Load() - ix.base.Load()) >> epochShift)
}
