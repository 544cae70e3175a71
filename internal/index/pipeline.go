// This file holds Match's memory pipeline: the walk over blocks, prefetching windows ahead.

package index

import (
	"slices"
	"unsafe"

	"kvrouter/internal/kvhash"
)

// window is the step of Match's memory pipeline (walk): prefetches go out
// 8 to 16 blocks ahead of their use, soon enough to arrive and few at a
// time (16 and 32 measured slower, 4 too; 16 no faster once runs were
// predicted a run at a time); past the end of the match up to two windows
// are hashed and prefetched in vain.
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
	sc.seqs = sc.seqs[:nb] // reset made room; past g.h, stale until hashed
	g := glider{seqs: sc.seqs, local: local, h: 1, last: local[0], primary: sc.primary, now: sc.now, chains: sc.chains}
	g.seqs[0] = ident(g.last)
	for g.h < min(3*window, nb) {
		g.hash()
	}
	agree := true // no source's chain is private yet
	held := false // g.want is the previous block's holding
	fast := false // and blocks may glide
	sc.frontier = 0
	ix.extend(sc, 3*window)
	// Block i's node is predicted at pn's k-th successor, k = i-pnFrom,
	// for i < pnEnd; pn nil: not predicted.
	var pn *node
	pnFrom, pnEnd := 0, 0
	for base := 0; base < nb; base += window {
		ix.extend(sc, base+3*window)
		ix.check(sc, base+window)
		// extend and check change predictions past this window only,
		// but may have extended or cut the one walk follows.
		pn, pnFrom, pnEnd = sc.predicted(base)
		end := min(base+window, nb)
		for i := base; i < end; i++ {
			if fast && pn != nil && i < pnEnd {
				if i = g.glide(nodeAfter(pn, i-pnFrom), i, min(end, pnEnd)); i == end {
					break
				}
			}
			g.hash()
			seq := g.seqs[i]
			if i >= pnEnd {
				pn, pnFrom, pnEnd = sc.predicted(i)
			}
			var n *node
			if pn != nil {
				n = nodeAfter(pn, i-pnFrom)
			}
			if n == nil || n.seq != seq {
				sc.finds++
				if n = ix.refind(sc, i); n == nil {
					sc.primary, sc.glided = g.primary, g.glided
					return i // the prefix ends here for everybody
				}
				pn, pnFrom, pnEnd = sc.predicted(i)
			}
			// The usual step along a conversation is a node with its
			// holders inline, the same words as the block before, and no
			// holder with an engine hash of its own: nothing changes for
			// anybody, so the holders are neither copied nor diffed (7%
			// off the median match).
			// So is a node whose holders are sparse in the arena with
			// the token of the block before: the same set (tokens.go),
			// neither loaded.
			if !held || !g.want.holds(n) {
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
						sc.primary, sc.glided = g.primary, g.glided
						return i
					}
				}
				if n.meta&metaMore == 0 { // cur is in sc.inline, which the next block reuses
					sc.prevInline = sc.inline
					cur = sc.prevInline[:len(cur)]
				}
				sc.prev, sc.prevDense, sc.prevFP = cur, dense, fp
				g.want, held = holdingOf(n, cur, dense)
			}
			if g.chains {
				if n.meta&metaAlt == 0 && agree {
					g.primary = append(g.primary, n.engine) // all chains agree
				} else {
					sc.primary = g.primary
					sc.extendChains(i, n.engine, sc.alts(&ix.shards[shardOf(seq)], n))
					g.primary, agree = sc.primary, len(sc.privIDs) == 0
				}
			}
			if g.now != 0 {
				n.touch(g.now)
			}
			fast = held && (agree || !g.chains)
		}
	}
	sc.primary, sc.glided = g.primary, g.glided
	return nb
}

// holding is what a node's holder words must be for it to hold the set
// of the block before without loading it: the same words inline (h0 and
// h1), or in the arena the same set token (h1: mask covers it only), and
// no holder with an engine hash of its own.
type holding struct {
	meta uint32 // n.meta&(metaMore|metaAlt)
	hs   uint64 // h0 | h1<<32
	mask uint64
}

// holdingOf returns the holding of node n, whose holders are cur (dense:
// a dense block), and whether there is one: a dense set or one too large
// to fit inline has none.
func holdingOf(n *node, cur []uint32, dense bool) (holding, bool) {
	switch {
	case n.meta&metaMore != 0 && n.h1 != 0: // a set token
		return holding{meta: metaMore, hs: uint64(n.h1) << 32, mask: 0xffffffff << 32}, true
	case !dense && fitsInline(cur):
		return holding{hs: packInline(cur), mask: ^uint64(0)}, true
	}
	return holding{}, false
}

// holds reports whether n has holding w.
func (w holding) holds(n *node) bool {
	return n.meta&(metaMore|metaAlt) == w.meta && (n.words()^w.hs)&w.mask == 0
}

// words returns n's holder words h0 and h1 as one.
func (n *node) words() uint64 { return uint64(n.h0) | uint64(n.h1)<<32 }

// glider is walk's state for glide.
type glider struct {
	seqs, local []uint64
	h           int    // blocks hashed
	last        uint64 // block h-1's sequence hash
	primary     []uint64
	want        holding
	now         uint32
	chains      bool
	glided      int // blocks taken by glide
}

// hash hashes the next block, if any: walk hashes three windows ahead, a
// block a step, so that the hash chain's latency hides behind the work on
// the step's block, where hashing a window at once would wait on it.
func (g *glider) hash() {
	if g.h < len(g.seqs) {
		g.last = kvhash.SequenceHash(g.last, g.local[g.h])
		g.seqs[g.h] = ident(g.last)
		g.h++
	}
}

// glide takes blocks [i, stop) while each is at its predicted node, first
// for block i and its successors, holding what the block before held, with no
// engine hash of its own: the usual step along a conversation, where
// nothing changes for anybody. It returns the first block it did not
// take. Its loop is walk's inner loop, kept apart from walk's calls and
// with few values, so that they all stay in registers: ~100 instructions
// a block in walk's loop, ~60 here with the hash's ~25 (objdump). The
// chain and the recency stamps are written after, from the nodes the loop
// brought to cache.
func (g *glider) glide(first *node, i, stop int) int {
	seqs, local, h, last := g.seqs, g.local[:len(g.seqs)], g.h, g.last
	w := g.want
	from, n := i, first
	for i < stop {
		if n.seq != seqs[i] || !w.holds(n) {
			break
		}
		if h < len(seqs) {
			last = kvhash.SequenceHash(last, local[h])
			seqs[h] = ident(last)
			h++
		}
		// Never a pointer past the run's last node: it may point past
		// its chunk, which Go forbids (checkptr catches it under -race).
		if i++; i < stop {
			n = nodeAfter(n, 1)
		}
	}
	g.h, g.last = h, last
	g.glided += i - from
	if g.chains {
		for k := range i - from {
			g.primary = append(g.primary, nodeAfter(first, k).engine)
		}
	}
	if g.now != 0 {
		for k := range i - from {
			nodeAfter(first, k).touch(g.now)
		}
	}
	return i
}

// seg is a prediction: blocks from, from+1, ... are at node n and its
// successors in n's run (a run's nodes are consecutive: a line holds two),
// up to the next seg, the run's end or the frontier. n nil: block from's
// directory line was asked for, and the blocks after it are unknown until
// walk or check looks it up and predicts anew (chainFrom). Predictions are
// kept a run at a time, not a block at a time: the pipeline's bookkeeping
// was ~30% of a warm match when it wrote and read two words a block.
type seg struct {
	from int
	n    *node
	ref  uint32
}

// runEnd returns the block after the last one s can predict: its run's.
func (s seg) runEnd() int { return s.from + int(runLen-s.ref%runLen) }

// nodeAfter returns the k-th node after n in its run.
func nodeAfter(n *node, k int) *node {
	return (*node)(unsafe.Add(unsafe.Pointer(n), k*int(unsafe.Sizeof(node{}))))
}

// segAt returns the index of the seg block i falls in (segs[0] is at block
// 0 once extend ran).
func (sc *scratch) segAt(i int) int {
	k := len(sc.segs) - 1
	for k > 0 && sc.segs[k].from > i {
		k--
	}
	return k
}

// predicted returns the prediction block i falls in, as walk follows it:
// block j in [from, end) is at the (j-from)-th node after n; n nil: i is
// not predicted (end is i+1).
func (sc *scratch) predicted(i int) (n *node, from, end int) {
	if i >= sc.frontier || len(sc.segs) == 0 {
		return nil, i, i + 1
	}
	k := sc.segAt(i)
	s := sc.segs[k]
	if s.n == nil {
		return nil, i, i + 1
	}
	end = min(s.runEnd(), sc.frontier)
	if k+1 < len(sc.segs) {
		end = min(end, sc.segs[k+1].from)
	}
	return s.n, s.from, end
}

// extend predicts where the nodes of blocks [sc.frontier, to) are: each
// right after the block before's, within its run, and starts loading
// their lines. Where a run ends, the chain jumps: the next block's
// directory line is asked for instead. A block after one whose place is
// unknown stays unknown until walk or check finds that one and predicts
// anew (chainFrom).
func (ix *Index) extend(sc *scratch, to int) {
	to = min(to, len(sc.seqs))
	j := sc.frontier
	if j >= to {
		return
	}
	addrs := sc.addrs[:0]
	if j == 0 {
		// The first block has no predecessor: ask for its directory line.
		sc.segs = append(sc.segs[:0], seg{})
		addrs = ix.askDir(addrs, sc.seqs[0])
	} else if s := sc.segs[len(sc.segs)-1]; s.n != nil {
		addrs = ix.follow(sc, s, j, to, addrs)
	}
	sc.frontier = to
	if len(addrs) > 0 {
		prefetch(addrs)
	}
	sc.addrs = addrs
}

// follow predicts blocks [j, to) along s's run, s being the last seg,
// appending to addrs the lines to ask for but block j-1's; where the run
// ends, the next block's directory line, with a seg asking for it.
func (ix *Index) follow(sc *scratch, s seg, j, to int, addrs []uintptr) []uintptr {
	e := s.runEnd()
	last := min(e, to) - 1
	if j <= last {
		a := uintptr(unsafe.Pointer(nodeAfter(s.n, j-s.from))) &^ 63
		if j > s.from && uintptr(unsafe.Pointer(nodeAfter(s.n, j-1-s.from)))&^63 == a {
			a += 64 // block j-1's line, asked already
		}
		for end := uintptr(unsafe.Pointer(nodeAfter(s.n, last-s.from))); a <= end; a += 64 {
			addrs = append(addrs, a)
		}
	}
	if e < to {
		sc.segs = append(sc.segs, seg{from: e})
		addrs = ix.askDir(addrs, sc.seqs[e])
	}
	return addrs
}

// askDir appends the address of the home directory line of identity seq.
func (ix *Index) askDir(addrs []uintptr, seq uint64) []uintptr {
	sh := &ix.shards[shardOf(seq)]
	if len(sh.dir) == 0 {
		return addrs
	}
	return append(addrs, uintptr(unsafe.Pointer(&sh.dir[home(seq, uint64(len(sh.dir)-1))])))
}

// cut drops the predictions from block j on: block j is not where they
// said.
func (sc *scratch) cut(j int) {
	k := len(sc.segs)
	for k > 0 && sc.segs[k-1].from >= j {
		k--
	}
	clear(sc.segs[k:]) // no node pointers kept past use
	sc.segs = sc.segs[:k]
}

// check verifies the predictions of the window at i, whose lines were
// asked for a window ago, and asks for the holder blocks walk will load.
// At the first block whose place is not confirmed it stops: a node not
// where predicted has its directory line asked for (walk looks it up); a
// block whose directory line was asked for a window ago is looked up now
// and the chain predicted anew from it, its lines asked for (walk checks
// them).
func (ix *Index) check(sc *scratch, i int) {
	end := min(i+window, sc.frontier)
	if i >= end {
		return
	}
	addrs := sc.addrs[:0]
	for k := sc.segAt(i); k < len(sc.segs) && i < end; k++ {
		s := sc.segs[k]
		if s.n == nil {
			if s.from == i { // asked for a window ago
				ix.refind(sc, i) // nil: the prefix ends here, walk will see
			}
			break
		}
		stop := min(end, s.runEnd())
		if k+1 < len(sc.segs) {
			stop = min(stop, sc.segs[k+1].from)
		}
		// The run's blocks follow their chain: if the last block predicted
		// in the window is there, so are the ones before it (walk checks
		// each anyway). Only their holders, in the arena, may need asking
		// for; inline ones came with the nodes.
		if stop > i {
			if l := nodeAfter(s.n, stop-1-s.from); l.seq == sc.seqs[stop-1] && l.meta&metaMore == 0 {
				i = stop
				continue
			}
		}
		var prev *node // block i-1's node, when confirmed
		if i > s.from {
			prev = nodeAfter(s.n, i-1-s.from)
			if prev.seq != sc.seqs[i-1] {
				prev = nil
			}
		}
		for ; i < stop; i++ {
			n := nodeAfter(s.n, i-s.from) // never past the run's last node
			seq := sc.seqs[i]
			if n.seq != seq { // a jump the run did not foretell
				sc.cut(i)
				sc.segs = append(sc.segs, seg{from: i})
				addrs = ix.askDir(addrs, seq)
				break
			}
			// Holders in the arena are loaded by walk unless they are
			// the set of the block before (same token, tokens.go).
			if n.meta&metaMore != 0 && (n.meta&metaAlt != 0 || n.h1 == 0 || prev == nil || prev.meta&metaMore == 0 || prev.h1 != n.h1) {
				addrs = append(addrs, uintptr(unsafe.Pointer(&ix.shards[shardOf(seq)].arena[n.h0])))
			}
			prev = n
		}
		if i < stop {
			break
		}
	}
	if len(addrs) > 0 {
		prefetch(addrs)
	}
	sc.addrs = addrs
}

// refind looks block j up in the directory, where the chain goes on, and
// predicts anew from its node, which it returns; nil if the index does not
// hold the block.
func (ix *Index) refind(sc *scratch, j int) *node {
	seq := sc.seqs[j]
	sh := &ix.shards[shardOf(seq)]
	pos, ok := sh.find(seq)
	if !ok {
		return nil
	}
	n := sh.at(pos)
	ix.chainFrom(sc, j, n, sh.dir[pos].ref)
	return n
}

// chainFrom predicts anew the blocks after j, whose node n at ref has just
// been found, up to the frontier, and starts loading their lines and n's.
func (ix *Index) chainFrom(sc *scratch, j int, n *node, ref uint32) {
	sc.cut(j)
	s := seg{from: j, n: n, ref: ref}
	sc.segs = append(sc.segs, s)
	addrs := append(sc.chainAddrs[:0], uintptr(unsafe.Pointer(n))&^63)
	addrs = ix.follow(sc, s, j+1, sc.frontier, addrs)
	prefetch(addrs)
	sc.chainAddrs = addrs
}
