// This file holds a match's lazy per-source accounting: where each source's holding changes.

package index

import "math/bits"

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

// advance moves the match from block i-1 (holders prev) to block i.
func (sc *scratch) advance(i uint32, prev []uint32, prevDense bool, cur []uint32, curDense bool) {
	switch {
	case i == 0:
		sc.start(cur, curDense)
	case !prevDense && !curDense:
		sc.step(i, prev, cur)
	default:
		if !prevDense {
			sc.convA = toMasks(sc.convA, prev)
			prev = sc.convA
		}
		if !curDense {
			sc.convB = toMasks(sc.convB, cur)
			cur = sc.convB
		}
		sc.stepDense(i, prev, cur)
	}
}

// toMasks turns sorted holder words into tier-mask words indexed by id.
func toMasks(dst, ws []uint32) []uint32 {
	n := 0
	if len(ws) > 0 {
		n = int(ws[len(ws)-1]>>idShift/nibbles) + 1
	}
	dst = append(dst[:0], make([]uint32, n)...)
	for _, w := range ws {
		id := w >> idShift
		dst[id/nibbles] |= w & tierMask << (4 * (id % nibbles))
	}
	return dst
}

// start admits the holders of the first block. A dense set's holders
// start as one cohort: their states stay implicit in sc.cohort, one tier
// mask each, until a block changes their holding (state materializes
// them) or they leave together (stepDense notes them in sc.left): a
// prefix shared by hundreds of sources costs no state for each of them.
func (sc *scratch) start(cur []uint32, dense bool) {
	if !dense {
		for _, w := range cur {
			sc.admit(w>>idShift, w&tierMask)
		}
		return
	}
	// Sources registered after this Match began have no state slot.
	words := (len(sc.st) + nibbles - 1) / nibbles
	n := min(len(cur), words)
	sc.cohort = append(sc.cohort[:0], cur[:n]...)
	if r := len(sc.st) % nibbles; r != 0 && n == words {
		sc.cohort[n-1] &= 1<<(4*r) - 1
	}
	for _, w := range sc.cohort {
		sc.alive += bits.OnesCount32((w | w>>1 | w>>2 | w>>3) & 0x11111111)
	}
}

// implicit returns the tier mask of cohort member id, 0 when id is not
// (or no longer) an implicit member.
func (sc *scratch) implicit(id uint32) uint32 {
	if k := id / nibbles; int(k) < len(sc.cohort) {
		return sc.cohort[k] >> (4 * (id % nibbles)) & tierMask
	}
	return 0
}

// unmark takes id out of the cohort's implicit members.
func (sc *scratch) unmark(id uint32) {
	sc.cohort[id/nibbles] &^= tierMask << (4 * (id % nibbles))
}

// leave books implicit member id, of tier mask m, leaving at block i.
func (sc *scratch) leave(id, m, i uint32) {
	sc.unmark(id)
	sc.left = append(sc.left, left{id: id, at: i, mask: m})
	sc.alive--
}

// left is a cohort member that left at block at, having held every block
// before it on the tiers of mask.
type left struct {
	id, at, mask uint32
}

func (sc *scratch) admit(id, m uint32) {
	if int(id) >= len(sc.st) {
		return // registered after this Match began
	}
	sc.st[id] = srcState{gen: sc.gen, alive: true, mask: m, devDone: m&1 == 0}
	sc.cands = append(sc.cands, id)
	sc.alive++
}

// change books a source's tier mask changing to m at block i.
func (sc *scratch) change(st *srcState, i, m uint32) {
	if m == st.mask {
		return
	}
	st.run(i)
	if !st.devDone && m&1 == 0 {
		st.dev, st.devDone = i, true
	}
	st.mask, st.since = m, i
}

// step moves from block i-1 (holders prev) to block i (holders cur). Both
// are sorted by source id; equal words mean nothing changed for that source.
func (sc *scratch) step(i uint32, prev, cur []uint32) {
	a, b := 0, 0
	for a < len(prev) && b < len(cur) {
		// Holder sets of consecutive blocks mostly agree: skip equal runs
		// in chunks, long ones with the vectorised memequal.
		for a+32 <= len(prev) && b+32 <= len(cur) && [32]uint32(prev[a:a+32]) == [32]uint32(cur[b:b+32]) {
			a += 32
			b += 32
		}
		for a+4 <= len(prev) && b+4 <= len(cur) {
			p, c := prev[a:a+4:a+4], cur[b:b+4:b+4]
			if p[0] != c[0] || p[1] != c[1] || p[2] != c[2] || p[3] != c[3] {
				break
			}
			a += 4
			b += 4
		}
		if a == len(prev) || b == len(cur) {
			break
		}
		if prev[a] == cur[b] {
			a++
			b++
			continue
		}
		ia, ib := prev[a]>>idShift, cur[b]>>idShift
		switch {
		case ia == ib:
			if st := sc.state(ia); st != nil {
				sc.change(st, i, cur[b]&tierMask)
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

// stepDense is step over tier-mask words: one word covers eight sources.
func (sc *scratch) stepDense(i uint32, prev, cur []uint32) {
	n, common := max(len(prev), len(cur)), min(len(prev), len(cur))
	for k := 0; k < n; k++ {
		// Consecutive blocks' holder sets mostly agree: skip equal words
		// in a tight loop.
		for k < common && prev[k] == cur[k] {
			k++
		}
		if k == n {
			break
		}
		var p, c uint32
		if k < len(prev) {
			p = prev[k]
		}
		if k < len(cur) {
			c = cur[k]
		}
		if p == c {
			continue
		}
		for d := p ^ c; d != 0; {
			j := uint32(bits.TrailingZeros32(d)) / 4
			d &^= tierMask << (4 * j)
			if p>>(4*j)&tierMask == 0 {
				continue // held at i but not at i-1: not a prefix
			}
			id := uint32(k)*nibbles + j
			if m := sc.implicit(id); m != 0 && c>>(4*j)&tierMask == 0 {
				sc.leave(id, m, i) // the usual end of a shared prefix
				continue
			}
			st := sc.state(id)
			if st == nil {
				continue
			}
			if m := c >> (4 * j) & tierMask; m == 0 {
				st.end(i)
				sc.alive--
			} else {
				sc.change(st, i, m)
			}
		}
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
