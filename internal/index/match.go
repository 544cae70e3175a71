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
// by Depth, deepest first. It stops as soon as no source extends the prefix.
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

	touch := ix.maxBlocks > 0
	var now uint32
	if touch {
		now = ix.tick()
	}
	var seq uint64
	reached := 0
	for i, l := range local {
		if i == 0 {
			seq = l
		} else {
			seq = kvhash.SequenceHash(seq, l)
		}
		sh := &ix.shards[shardOf(seq)]
		sh.mu.RLock()
		slot, ok := sh.find(seq)
		if !ok {
			sh.mu.RUnlock()
			break
		}
		n := &sh.nodes[slot]
		cur := sc.cur[:0]
		if n.more == 0 {
			cur = append(cur, n.h0)
		} else {
			cur = append(cur, sh.words(n)...)
		}
		engine := n.engine
		sc.alts = sc.alts[:0]
		if opts.Chains && n.depth&depthAlt != 0 {
			for _, w := range cur {
				if w&altBit != 0 {
					sc.alts = append(sc.alts, altHolder{w >> idShift, sh.alt[altKey(slot, w>>idShift)]})
				}
			}
		}
		if touch {
			n.touch(now)
		}
		sh.mu.RUnlock()
		sc.cur = cur

		if i == 0 {
			sc.start(cur)
		} else {
			sc.step(uint32(i), sc.prev, cur)
		}
		if sc.alive == 0 {
			break
		}
		if opts.Chains {
			sc.extendChains(i, engine)
		}
		reached = i + 1
		sc.prev, sc.cur = sc.cur, sc.prev
	}
	return sc.results(dst, srcs, uint32(reached))
}

// srcState is one source's progress through a Match. Tier accounting is
// lazy: a source costs work only where its holding changes, so a prefix
// held alike by a thousand sources costs a comparison of holder words per
// block, not a thousand updates.
type srcState struct {
	gen     uint32
	alive   bool
	devDone bool
	mask    uint32 // tier bits at the current run
	since   uint32 // depth where the current run started
	depth   uint32
	dev     uint32
	tiers   [numTiers]uint32
	chain   int32 // 1 + index into scratch.private; 0: shares the primary chain
}

type altHolder struct {
	id uint32
	e  uint64
}

// scratch is a Match's working memory, pooled.
type scratch struct {
	gen       uint32
	st        []srcState
	alive     int
	prev, cur []uint32
	cands     []uint32
	alts      []altHolder
	chains    bool
	primary   []uint64
	private   [][]uint64
	privIDs   []uint32
	buckets   []int32
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
	sc.prev, sc.cur, sc.cands = sc.prev[:0], sc.cur[:0], sc.cands[:0]
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

// start admits the holders of the first block.
func (sc *scratch) start(cur []uint32) {
	for _, w := range cur {
		id := w >> idShift
		if int(id) >= len(sc.st) {
			continue
		}
		m := w & tierMask
		sc.st[id] = srcState{gen: sc.gen, alive: true, mask: m, devDone: m&1 == 0}
		sc.cands = append(sc.cands, id)
		sc.alive++
	}
}

// step moves from block i-1 (holders prev) to block i (holders cur). Both
// are sorted by source id; equal words mean nothing changed for that source.
func (sc *scratch) step(i uint32, prev, cur []uint32) {
	a, b := 0, 0
	for a < len(prev) && b < len(cur) {
		if prev[a] == cur[b] {
			a++
			b++
			continue
		}
		ia, ib := prev[a]>>idShift, cur[b]>>idShift
		switch {
		case ia == ib:
			if st := sc.state(ia); st != nil {
				if m := cur[b] & tierMask; m != st.mask {
					st.run(i)
					if !st.devDone && m&1 == 0 {
						st.dev, st.devDone = i, true
					}
					st.mask, st.since = m, i
				}
			}
			a++
			b++
		case ia < ib:
			sc.drop(ia, i)
			a++
		default:
			b++ // held at i but not at i-1: not a prefix
		}
	}
	for ; a < len(prev); a++ {
		sc.drop(prev[a]>>idShift, i)
	}
}

// run books the blocks [since, i) to the run's fastest tier.
func (st *srcState) run(i uint32) {
	st.tiers[bits.TrailingZeros32(st.mask)] += i - st.since
}

func (st *srcState) end(i uint32) {
	st.run(i)
	st.depth = i
	if !st.devDone {
		st.dev, st.devDone = i, true
	}
	st.alive = false
}

func (sc *scratch) drop(id, i uint32) {
	if st := sc.state(id); st != nil {
		st.end(i)
		sc.alive--
	}
}

// extendChains appends block i's engine hash to every live chain. Sources
// agreeing with node.engine all along share the primary chain; one that
// disagrees once gets a private copy.
func (sc *scratch) extendChains(i int, engine uint64) {
	sc.primary = append(sc.primary, engine)
	for _, a := range sc.alts {
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
