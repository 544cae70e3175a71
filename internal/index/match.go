package index

import (
	"math/bits"

	"kvrouter/internal/kvhash"
)

// MatchOptions tunes Match.
type MatchOptions struct {
	// Chains asks for each source's retained engine hashes of its matched
	// blocks, to build a hint.
	Chains bool
}

// Match is one source's overlap with a request.
type Match struct {
	Source Source
	// Depth is the number of blocks from the root the source holds
	// contiguously, on any tier.
	Depth int
	// DeviceDepth is the contiguous prefix held on the device tier.
	DeviceDepth int
	// Tiers counts blocks [0, Depth) by the fastest tier holding them, so
	// they sum to Depth; Tiers[TierHost] etc. are the lower-tier blocks
	// that extend the device prefix.
	Tiers [NumTiers]int
	// Chain, with MatchOptions.Chains, is the source's own engine hashes
	// for blocks [0, Depth). Chains of sources that agree share memory:
	// do not append to one.
	Chain []uint64
}

// Match returns, for every source holding at least the request's first
// block, its overlap with the request given by its local hashes, ordered
// by Depth, deepest first (ties in no particular order). It stops walking
// the request once no source extends the prefix, having looked at most one
// lookup batch ahead.
func (ix *Index) Match(local []uint64, opts MatchOptions) []Match {
	return ix.AppendMatch(nil, local, opts)
}

// AppendMatch is Match appending to dst, to reuse its memory.
func (ix *Index) AppendMatch(dst []Match, local []uint64, opts MatchOptions) []Match {
	if len(local) == 0 {
		return dst
	}
	srcs := ix.reg.ids()
	sc := ix.scratch.Get().(*scratch)
	defer ix.scratch.Put(sc)
	sc.reset(len(srcs), opts.Chains, len(local))

	var now uint32
	if ix.maxBlocks > 0 {
		now = ix.tick()
	}
	var seq uint64
	reached := 0
	batch := firstBatch
	for base := 0; base < len(local); base, batch = base+batch, min(2*batch, len(sc.ents)) {
		ents := sc.ents[:min(batch, len(local)-base)]
		for k := range ents {
			if i := base + k; i == 0 {
				seq = local[0]
			} else {
				seq = kvhash.SequenceHash(seq, local[i])
			}
			ents[k].seq = seq
			if seq == 0 {
				ents[k].seq = zeroSeq
			}
		}
		ix.lookupBatch(sc, ents, opts.Chains, now)

		for k := range ents {
			e := &ents[k]
			i := base + k
			if !e.ok {
				return sc.results(dst, srcs, uint32(reached))
			}
			cur := sc.hbuf[e.off : e.off+e.n]
			sc.advance(uint32(i), sc.prev, sc.prevDense, cur, e.dense)
			if sc.alive == 0 {
				return sc.results(dst, srcs, uint32(reached))
			}
			if opts.Chains {
				sc.extendChains(i, e.engine, sc.abuf[e.aoff:e.aoff+e.an])
			}
			reached = i + 1
			sc.prev, sc.prevDense = cur, e.dense
		}
		// The next batch reuses hbuf: keep the last holders apart.
		sc.keep = append(sc.keep[:0], sc.prev...)
		sc.prev = sc.keep
	}
	return sc.results(dst, srcs, uint32(reached))
}

// Match looks blocks up in batches: within a batch the cache misses of the
// lookups overlap; past the point where no source extends the prefix a
// batch wastes its remaining lookups. Batches start small, for requests
// that match little, and double up to maxBatch.
const (
	firstBatch = 8
	maxBatch   = 64
)

// batchEnt is one block of a lookup batch.
type batchEnt struct {
	seq      uint64
	engine   uint64
	ok       bool
	dense    bool // hbuf holds tier-mask words, not holder words
	off, n   int  // holders in scratch.hbuf
	aoff, an int  // alt holders in scratch.abuf
}

// lookupBatch copies out the nodes of a batch of identities. It read-locks
// the shards involved in ascending order (writers hold one shard lock at a
// time, so readers holding several cannot deadlock with them), then loads
// every node's cache line before using any, so that the misses overlap
// instead of queueing behind each other.
func (ix *Index) lookupBatch(sc *scratch, ents []batchEnt, chains bool, now uint32) {
	var locked uint64
	for k := range ents {
		locked |= 1 << shardOf(ents[k].seq)
	}
	for m := locked; m != 0; m &= m - 1 {
		ix.shards[bits.TrailingZeros64(m)].mu.RLock()
	}
	var sink uint64
	for k := range ents {
		sh := &ix.shards[shardOf(ents[k].seq)]
		if len(sh.tab) > 0 {
			sink += sh.tab[ents[k].seq&uint64(len(sh.tab)-1)].seq
		}
	}
	for k := range ents { // holder blocks, now that the nodes are in cache
		sh := &ix.shards[shardOf(ents[k].seq)]
		if len(sh.tab) > 0 {
			if n := &sh.tab[ents[k].seq&uint64(len(sh.tab)-1)]; n.meta&metaMore != 0 && n.seq == ents[k].seq {
				sink += uint64(sh.arena[n.h0])
			}
		}
	}
	sc.sink = sink
	hb, ab := sc.hbuf[:0], sc.abuf[:0]
	for k := range ents {
		e := &ents[k]
		sh := &ix.shards[shardOf(e.seq)]
		pos, ok := sh.find(e.seq)
		e.ok = ok
		if !ok {
			break // the prefix ends here for everybody
		}
		n := &sh.tab[pos]
		e.engine = n.engine
		e.off = len(hb)
		hb, e.dense = sh.appendRaw(hb, n)
		e.n = len(hb) - e.off
		e.aoff = len(ab)
		if chains && n.meta&metaAlt != 0 {
			sc.tmp = sh.appendHolders(sc.tmp[:0], n)
			for _, w := range sc.tmp {
				if w&altBit != 0 {
					ab = append(ab, altHolder{w >> idShift, sh.alt[altKey{e.seq, w >> idShift}]})
				}
			}
		}
		e.an = len(ab) - e.aoff
		if now != 0 {
			n.touch(now)
		}
	}
	for m := locked; m != 0; m &= m - 1 {
		ix.shards[bits.TrailingZeros64(m)].mu.RUnlock()
	}
	sc.hbuf, sc.abuf = hb, ab
}

// scratch is a Match's working memory, pooled.
type scratch struct {
	gen       uint32
	st        []srcState
	alive     int
	ents      [maxBatch]batchEnt
	hbuf      []uint32    // holders of the batch
	abuf      []altHolder // alt holders of the batch
	prev      []uint32    // holders of the previous block
	prevDense bool
	keep      []uint32
	tmp       []uint32
	convA     []uint32 // holder words turned into tier-mask words
	convB     []uint32
	cands     []uint32
	chains    bool
	primary   []uint64
	private   [][]uint64
	privIDs   []uint32
	buckets   []int32
	sink      uint64
}

func (sc *scratch) reset(nsrc int, chains bool, n int) {
	sc.gen++
	if sc.gen == 0 { // wrapped: stale states could look current
		clear(sc.st)
		sc.gen = 1
	}
	if len(sc.st) < nsrc {
		sc.st = append(sc.st, make([]srcState, nsrc-len(sc.st))...)
	}
	sc.alive = 0
	sc.prev, sc.prevDense, sc.cands = nil, false, sc.cands[:0]
	sc.chains = chains
	sc.primary, sc.private, sc.privIDs = nil, sc.private[:0], sc.privIDs[:0]
	if chains {
		// Fresh each call: results keep slices of it.
		sc.primary = make([]uint64, 0, n)
	}
}

func (sc *scratch) state(id uint32) *srcState {
	if int(id) >= len(sc.st) {
		return nil // registered after this Match began
	}
	st := &sc.st[id]
	if st.gen != sc.gen || !st.alive {
		return nil
	}
	return st
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
// candidate, deepest first (a counting sort: depths are small integers).
func (sc *scratch) results(dst []Match, srcs []*source, reached uint32) []Match {
	if cap(sc.buckets) < int(reached)+2 {
		sc.buckets = make([]int32, reached+2)
	}
	buckets := sc.buckets[:reached+2]
	clear(buckets)
	kept := 0
	for _, id := range sc.cands {
		st := &sc.st[id]
		if st.alive {
			st.end(reached)
		}
		if int(id) >= len(srcs) || srcs[id] == nil {
			continue // removed while we matched
		}
		buckets[reached-st.depth+1]++
		kept++
	}
	for d := 1; d < len(buckets); d++ {
		buckets[d] += buckets[d-1]
	}
	base := len(dst)
	dst = append(dst, make([]Match, kept)...)
	out := dst[base:]
	for _, id := range sc.cands {
		if int(id) >= len(srcs) || srcs[id] == nil {
			continue
		}
		st := &sc.st[id]
		k := &buckets[reached-st.depth]
		m := &out[*k]
		*k++
		m.Source = srcs[id].key
		m.Depth = int(st.depth)
		m.DeviceDepth = int(st.dev)
		for t := range numTiers {
			m.Tiers[t] = int(st.tiers[t])
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
	return dst
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
