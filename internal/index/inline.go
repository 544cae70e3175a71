// This file holds the inline holders: up to three holder words kept in a node itself.

package index

// Inline holders. A node keeps up to three holder words in its last 8
// bytes (h0 | h1<<32) when each fits in 21 bits, that is when the source
// is numbered below 1<<16: a third holder would otherwise cost an arena
// block, a cache line more for every match through the node (four in ten
// of the holder blocks a conversation's match loaded). Words are sorted by
// source id, packed from the low bits up; a holder word is never 0, so
// the first 0 ends the list.
const (
	inlineMax  = 3
	inlineBits = 21
	inlineMask = 1<<inlineBits - 1
)

// packed returns n's inline holder words packed, as stored.
func (n *node) packed() uint64 { return uint64(n.h0) | uint64(n.h1)<<32 }

// appendInline appends the holder words of n, which keeps them inline, to
// dst.
func (n *node) appendInline(dst []uint32) []uint32 {
	for hs := n.packed(); hs != 0; hs >>= inlineBits {
		dst = append(dst, uint32(hs&inlineMask))
	}
	return dst
}

// inlineCount is the number of holders n keeps inline.
func (n *node) inlineCount() int {
	hs, k := n.packed(), 0
	for ; hs != 0; hs >>= inlineBits {
		k++
	}
	return k
}

// fitsInline reports whether holder words ws, sorted, can be kept inline.
func fitsInline(ws []uint32) bool {
	if len(ws) > inlineMax {
		return false
	}
	for _, w := range ws {
		if w > inlineMask {
			return false
		}
	}
	return true
}

// packInline packs holder words that fit inline.
func packInline(ws []uint32) uint64 {
	var hs uint64
	for k, w := range ws {
		hs |= uint64(w) << (inlineBits * k)
	}
	return hs
}

// setInline stores ws, which fit, as n's inline holders.
func (n *node) setInline(ws []uint32) {
	hs := packInline(ws)
	n.h0, n.h1 = uint32(hs), uint32(hs>>32)
}

// putInline inserts holder word w into n's inline holders, or replaces
// the word of w's source, in place; false if the result would not fit.
func (n *node) putInline(w uint32) bool {
	if w > inlineMask {
		return false
	}
	hs, id := n.packed(), w>>idShift
	for k := 0; k < inlineMax; k++ {
		at := uint(inlineBits * k)
		cur := uint32(hs >> at & inlineMask)
		switch {
		case cur == 0: // past the last word: append
			hs |= uint64(w) << at
		case cur>>idShift == id:
			hs = hs&^(inlineMask<<at) | uint64(w)<<at
		case cur>>idShift > id: // insert here, if there is room
			if hs>>(inlineBits*(inlineMax-1)) != 0 {
				return false
			}
			low := hs & (1<<at - 1)
			hs = low | uint64(w)<<at | (hs>>at)<<(at+inlineBits)
		default:
			continue
		}
		n.h0, n.h1 = uint32(hs), uint32(hs>>32)
		return true
	}
	return false
}
