package index

import (
	"slices"
	"unsafe"

	"kvrouter/internal/kvhash"
)

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
