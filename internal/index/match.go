package index

import (
	"math/bits"
	"slices"
	"unsafe"

	"kvrouter/internal/kvhash"
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
// put the bench's 16-source p99 at 13.5 µs rather than 8.7
// (docs/benchmarks.md, twelfth session).
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
	if ix.maxBlocks > 0 {
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
	clear(sc.at[:len(sc.seqs)])
	dst = sc.results(dst, tbl, uint32(reached))
	if opts.Chains {
		mem = sc.primary
		sc.primary = nil // the caller's now
	}
	return dst, mem
}

// window is the step of Match's memory pipeline (walk): prefetches go out
// 8 to 16 blocks ahead of their use, soon enough to arrive and few at a
// time (16 and 32 measured slower, 4 too); past the end of the match up to
// two windows are hashed and prefetched in vain.
const window = 8

// prefetchLocal starts loading the request's hashes, which hashes reads
// one block at a time: the request is usually cold.
func (sc *scratch) prefetchLocal(local []uint64) {
	addrs := sc.addrs[:0]
	for i := 0; i < len(local); i += 8 { // 8 hashes to a cache line
		addrs = append(addrs, uintptr(unsafe.Pointer(&local[i])))
	}
	addrs = append(addrs, uintptr(unsafe.Pointer(&local[len(local)-1])))
	prefetch(addrs)
	sc.addrs = addrs
}

// hashes extends sc.seqs to the identities of local's first n blocks.
func (sc *scratch) hashes(local []uint64, n int) []uint64 {
	n = min(n, len(local))
	seqs := sc.seqs
	i := len(seqs)
	if i >= n {
		return seqs
	}
	// The hashes form one chain of dependent multiplies: the previous one
	// is carried in a register rather than read back from seqs, which
	// would add a store-to-load forwarding delay to every link.
	var seq uint64
	if i == 0 {
		seq = local[0]
		seqs = append(seqs, seq)
		i++
	} else {
		seq = seqs[i-1]
	}
	for _, h := range local[i:n] {
		seq = kvhash.SequenceHash(seq, h)
		seqs = append(seqs, seq)
	}
	sc.seqs = seqs
	return seqs
}

// rlockShards read-locks every shard, in ascending order as every taker
// of several shard locks does.
func (ix *Index) rlockShards() {
	for i := range ix.shards {
		ix.shards[i].mu.RLock()
	}
}

func (ix *Index) runlockShards() {
	for i := range ix.shards {
		ix.shards[i].mu.RUnlock()
	}
}

// ident maps a sequence hash to its identity: 0 marks empty directory
// entries.
func ident(seq uint64) uint64 {
	if seq == 0 {
		return zeroSeq
	}
	return seq
}

// walk advances the match over the request's blocks a window at a time,
// hashing them as it goes, and returns how far it reached: the first block
// nobody extends the prefix to, or len(local). The caller holds the
// shards' read locks, so holders are compared where they are stored,
// without copying.
//
// Most of a match's time would be waiting for memory: every block's node
// is a likely cache miss. Nodes sit in runs that follow their chains
// (store.go), so walk runs a pipeline over windows of blocks: it predicts
// the nodes of the window after next, each right after the block before's
// in its run, asking for their lines, or for the directory line of a
// block where a run ends (extend); confirms the next window's predictions,
// asked for a window ago, looking up a block whose directory line came
// and predicting anew from it (check); and only then processes this
// window, hashing the blocks three windows on as it goes. A block whose
// node is not where predicted is looked up in the directory, and the
// chain predicted anew from it. The prefetches do not block: the loads
// proceed while the CPU works on the window at hand.
func (ix *Index) walk(sc *scratch, local []uint64) int {
	nb := len(local)
	seqs := sc.hashes(local, 3*window)
	h := len(seqs) // blocks hashed
	last := seqs[h-1]
	sc.seqs = seqs[:nb] // reset made room; past h, stale until hashed
	seqs = sc.seqs
	// The step below is the match's inner loop: what it reads and writes
	// for every block is kept in locals (registers), not in sc, whose
	// fields would cost a store and a reload per block. prevIn says the
	// previous block's holders fit inline, packed as h0 == p0, h1 == p1.
	primary, chains, now := sc.primary, sc.chains, sc.now
	agree := true // no source's chain is private yet
	var p0, p1 uint32
	prevIn := false
	var prevTok uint32 // the previous block's set token, when in the arena
	sc.frontier = 0
	ix.extend(sc, 3*window)
	for base := 0; base < nb; base += window {
		ix.extend(sc, base+3*window)
		ix.check(sc, base+window)
		end := min(base+window, nb)
		for i := base; i < end; i++ {
			// Hash three windows ahead, a block per step: the hash
			// chain's latency then hides behind the work on this block,
			// where hashing a window at once would wait on it.
			if h < nb {
				last = kvhash.SequenceHash(last, local[h])
				seqs[h] = last
				h++
			}
			seq := ident(seqs[i])
			n := sc.at[i]
			if n == nil || n.seq != seq {
				sh := &ix.shards[shardOf(seq)]
				pos, ok := sh.find(seq) // a jump: where does the chain go on?
				if !ok {
					sc.primary = primary
					return i // the prefix ends here for everybody
				}
				n = sh.at(pos)
				ix.chainFrom(sc, i, n, sh.dir[pos].ref)
			}
			// The usual step along a conversation is a node with its
			// holders inline, the same words as the block before, and no
			// holder with an engine hash of its own: nothing changes for
			// anybody, so the holders are neither copied nor diffed (7%
			// off the median match).
			// So is a node whose holders are sparse in the arena with
			// the token of the block before: the same set (tokens.go),
			// neither loaded.
			if n.meta&(metaMore|metaAlt) == metaMore && n.h1 == prevTok && prevTok != 0 {
				// nothing changes
			} else if n.meta&(metaMore|metaAlt) != 0 || !prevIn || n.h0 != p0 || n.h1 != p1 {
				sh := &ix.shards[shardOf(seq)]
				cur, dense := sh.holders(n, &sc.inline)
				var fp uint64
				if dense {
					fp = sh.denseFP(n)
				}
				// Dense sets are compared by fingerprint, not loaded.
				if i == 0 || dense != sc.prevDense || dense && fp != sc.prevFP || !dense && !slices.Equal(cur, sc.prev) {
					sc.advance(uint32(i), sc.prev, sc.prevDense, cur, dense)
					if sc.alive == 0 {
						sc.primary = primary
						return i
					}
				}
				if n.meta&metaMore == 0 { // cur is in sc.inline, which the next block reuses
					sc.prevInline = sc.inline
					cur = sc.prevInline[:len(cur)]
				}
				sc.prev, sc.prevDense, sc.prevFP = cur, dense, fp
				prevIn = !dense && fitsInline(cur)
				p0, p1, prevTok = 0, 0, 0
				if n.meta&metaMore != 0 {
					prevTok = n.h1
				}
				if prevIn {
					hs := packInline(cur)
					p0, p1 = uint32(hs), uint32(hs>>32)
				}
			}
			if chains {
				if n.meta&metaAlt == 0 && agree {
					primary = append(primary, n.engine) // all chains agree
				} else {
					sc.primary = primary
					sc.extendChains(i, n.engine, sc.alts(&ix.shards[shardOf(seq)], n))
					primary, agree = sc.primary, len(sc.privIDs) == 0
				}
			}
			if now != 0 {
				n.touch(now)
			}
		}
	}
	sc.primary = primary
	return nb
}

// askedRef marks a block whose directory line has been asked for: its
// node is not where the chain predicted, or the chain's run ended.
const askedRef = noRef - 1

// extend predicts where the nodes of blocks [sc.frontier, to) are: each
// right after the block before's, within its run, and starts loading
// their lines (a run's nodes are consecutive: a line holds two). Where a
// run ends, the chain jumps: the next block's directory line is asked
// for instead. A block after one whose place is unknown stays unknown
// until walk finds that one and predicts anew (chainFrom).
func (ix *Index) extend(sc *scratch, to int) {
	to = min(to, len(sc.seqs))
	j := sc.frontier
	if j >= to {
		return
	}
	addrs := sc.addrs[:0]
	switch {
	case j == 0:
		// The first block has no predecessor: ask for its directory line.
		sc.at[0], sc.refs[0] = nil, askedRef
		addrs = ix.askDir(addrs, sc.seqs[0])
		sc.unknown(1, to)
	case sc.refs[j-1] < askedRef:
		addrs = ix.follow(sc, j, to, sc.at[j-1], sc.refs[j-1], addrs)
	default:
		sc.unknown(j, to)
	}
	sc.frontier = to
	if len(addrs) > 0 {
		prefetch(addrs)
	}
	sc.addrs = addrs
}

// askDir appends the address of seq's home directory line.
func (ix *Index) askDir(addrs []uintptr, seq uint64) []uintptr {
	seq = ident(seq)
	sh := &ix.shards[shardOf(seq)]
	if len(sh.dir) == 0 {
		return addrs
	}
	return append(addrs, uintptr(unsafe.Pointer(&sh.dir[home(seq, uint64(len(sh.dir)-1))])))
}

// check verifies the predictions of the window at i, whose lines were
// asked for a window ago, and asks for the holder blocks walk will load.
// At the first block whose place is not confirmed it stops: a node not
// where predicted has its directory line asked for (walk looks it up); a
// block whose directory line was asked for a window ago is looked up now
// and the chain predicted anew from it, its lines asked for (walk checks
// them).
func (ix *Index) check(sc *scratch, i int) {
	seqs, at := sc.window(i)
	if len(seqs) == 0 {
		return
	}
	addrs := sc.addrs[:0]
	for k, seq := range seqs {
		j := i + k
		seq = ident(seq)
		n := at[k]
		if n != nil && n.seq == seq {
			if n.meta&metaMore != 0 && !sc.sameSet(j, n) {
				addrs = append(addrs, uintptr(unsafe.Pointer(&ix.shards[shardOf(seq)].arena[n.h0])))
			}
			continue
		}
		switch {
		case n != nil: // a jump the run did not foretell
			at[k], sc.refs[j] = nil, askedRef
			addrs = ix.askDir(addrs, seq)
			sc.forget(j + 1)
		case sc.refs[j] == askedRef:
			sh := &ix.shards[shardOf(seq)]
			if pos, ok := sh.find(seq); ok {
				ix.chainFrom(sc, j, sh.at(pos), sh.dir[pos].ref)
			} else {
				sc.forget(j + 1) // the prefix ends here: walk will see
			}
		}
		break
	}
	if len(addrs) > 0 {
		prefetch(addrs)
	}
	sc.addrs = addrs
}

// forget marks the predictions from block j to the frontier unknown.
func (sc *scratch) forget(j int) { sc.unknown(j, sc.frontier) }

// unknown marks blocks [j, to) unknown.
func (sc *scratch) unknown(j, to int) {
	for ; j < to; j++ {
		sc.at[j], sc.refs[j] = nil, noRef
	}
}

// follow predicts blocks [j, to) along the run of block j-1's node n at
// ref, appending to addrs the lines to ask for; where the run ends, the
// next block's directory line, and the blocks after it unknown.
func (ix *Index) follow(sc *scratch, j, to int, n *node, ref uint32, addrs []uintptr) []uintptr {
	line := uintptr(unsafe.Pointer(n)) &^ 63
	for ; j < to; j++ {
		if (ref+1)%runLen == 0 {
			sc.at[j], sc.refs[j] = nil, askedRef
			addrs = ix.askDir(addrs, sc.seqs[j])
			sc.unknown(j+1, to)
			break
		}
		n = (*node)(unsafe.Add(unsafe.Pointer(n), unsafe.Sizeof(node{})))
		ref++
		sc.at[j], sc.refs[j] = n, ref
		if a := uintptr(unsafe.Pointer(n)) &^ 63; a != line {
			addrs = append(addrs, a)
			line = a
		}
	}
	return addrs
}

// chainFrom predicts anew the blocks after j, whose node n at ref has just
// been found, up to the frontier, and starts loading their lines and n's.
func (ix *Index) chainFrom(sc *scratch, j int, n *node, ref uint32) {
	sc.at[j], sc.refs[j] = n, ref
	addrs := append(sc.chainAddrs[:0], uintptr(unsafe.Pointer(n))&^63)
	addrs = ix.follow(sc, j+1, sc.frontier, n, ref, addrs)
	prefetch(addrs)
	sc.chainAddrs = addrs
}

// sameSet reports whether block j's node n, with holders in the arena,
// has the set token of block j-1's node, confirmed already: walk will not
// load its holders.
func (sc *scratch) sameSet(j int, n *node) bool {
	if j == 0 || n.meta&metaAlt != 0 {
		return false
	}
	p := sc.at[j-1]
	return n.h1 != 0 && p != nil && p.seq == ident(sc.seqs[j-1]) && p.meta&metaMore != 0 && p.h1 == n.h1
}

// window returns the hashes of the window of blocks at i and their slots
// in sc.at; none past the request.
func (sc *scratch) window(i int) ([]uint64, []*node) {
	if i >= len(sc.seqs) {
		return nil, nil
	}
	seqs := sc.seqs[i:min(i+window, len(sc.seqs))]
	return seqs, sc.at[i : i+len(seqs)]
}

// scratch is a Match's working memory, pooled.
type scratch struct {
	gen        uint32
	st         []srcState
	alive      int
	now        uint32 // recency epoch to stamp on the nodes walked, 0: none
	seqs       []uint64
	at         []*node  // where each block's node likely is (extend, check)
	refs       []uint32 // and its ref, or noRef, or askedRef
	frontier   int      // blocks predicted so far
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
	if cap(sc.seqs) < n {
		sc.seqs = make([]uint64, 0, n)
	}
	if len(sc.at) < n {
		sc.at = make([]*node, n)
		sc.refs = make([]uint32, n)
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
