// This file holds a node's holders: inline, sparse or dense words, and their engine hashes.

package index

import (
	"math/bits"
	"slices"
)

// A node's holders are kept one of three ways, by size:
//   - inline: up to three holder words of sources numbered below 1<<16 in
//     the node itself, 21 bits each (inline.go);
//   - sparse: a block of holder words in the shard's arena, sorted by id;
//   - dense: a block of 4-bit tier masks indexed by source id, once a nibble
//     per possible source costs less than a word per holder. A block shared
//     by every source then costs half a byte per source, inserts and removals
//     are O(1), and Match compares holder sets a machine word at a time.
//
// Holder words are id<<idShift | altBit | tiers. Dense blocks keep no alt
// bit: for them the alt map alone says which holders disagree.
//
// Arena blocks are [count, kind|class, payload...] with room for 2<<class
// payload words; offset 0 is never a block.
const (
	arenaClasses = 27
	denseKind    = 1 << 31
	denseAt      = 64 // a sparse set this large turns dense if that is smaller
	sparseAt     = 32 // a dense set this small turns sparse
	nibbles      = 8  // tier masks per dense payload word
)

func classCap(c uint32) uint32 { return 2 << c }

// classFor returns the smallest class with room for n words.
func classFor(n uint32) uint32 {
	c := uint32(0)
	for classCap(c) < n {
		c++
	}
	return c
}

func (sh *shard) alloc(class uint32) uint32 {
	if n := len(sh.afree[class]); n > 0 {
		off := sh.afree[class][n-1]
		sh.afree[class] = sh.afree[class][:n-1]
		sh.arena[off+1] = class
		return off
	}
	if len(sh.arena) == 0 {
		sh.arena = append(sh.arena, 0) // offset 0 is never a block
	}
	off := uint32(len(sh.arena))
	need := 2 + int(classCap(class))
	sh.arena = append(sh.arena, make([]uint32, need)...)
	sh.arena[off+1] = class
	return off
}

func (sh *shard) release(off uint32) {
	class := sh.arena[off+1] &^ denseKind
	sh.arena[off] = 0
	sh.afree[class] = append(sh.afree[class], off)
}

func (sh *shard) isDense(n *node) bool {
	return n.meta&metaMore != 0 && sh.arena[n.h0+1]&denseKind != 0
}

func (sh *shard) sparseWords(n *node) []uint32 {
	return sh.arena[n.h0+2 : n.h0+2+sh.arena[n.h0]]
}

// A dense block ends with two words of fingerprint: the sum over its
// holders of a mix of (id, tier mask), kept as masks change. Match compares
// a thousand sources' holder sets block after block along a shared system
// prompt; equal fingerprints say the set did not change without loading
// the sets (a 64-bit sum, as trustworthy as the identities themselves).
const fpWords = 2

// denseCap is how many mask words a dense block of class c holds.
func denseCap(c uint32) uint32 { return classCap(c) - fpWords }

func (sh *shard) denseWords(n *node) []uint32 {
	return sh.arena[n.h0+2 : n.h0+2+denseCap(sh.arena[n.h0+1]&^denseKind)]
}

// denseFP returns a dense block's fingerprint.
func (sh *shard) denseFP(n *node) uint64 {
	at := n.h0 + 2 + denseCap(sh.arena[n.h0+1]&^denseKind)
	return uint64(sh.arena[at]) | uint64(sh.arena[at+1])<<32
}

// addFP adds d to a dense block's fingerprint.
func (sh *shard) addFP(n *node, d uint64) {
	at := n.h0 + 2 + denseCap(sh.arena[n.h0+1]&^denseKind)
	fp := uint64(sh.arena[at]) | uint64(sh.arena[at+1])<<32 + d
	sh.arena[at], sh.arena[at+1] = uint32(fp), uint32(fp>>32)
}

// fpOf is one holder's part of a fingerprint; a zero mask holds nothing.
func fpOf(id, mask uint32) uint64 {
	if mask == 0 {
		return 0
	}
	x := uint64(id)<<4 | uint64(mask) + 0x9e3779b97f4a7c15 // splitmix64
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// holderCount returns how many sources hold n.
func (sh *shard) holderCount(n *node) int {
	switch {
	case n.meta&metaMore != 0:
		return int(sh.arena[n.h0])
	}
	return n.inlineCount()
}

// search finds source id in sorted holder words.
func search(ws []uint32, id uint32) (int, bool) {
	lo, hi := 0, len(ws)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if ws[m]>>idShift < id {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(ws) && ws[lo]>>idShift == id
}

// denseWord rebuilds a dense holder's word, alt bit included.
func (sh *shard) denseWord(n *node, id, tiers uint32) uint32 {
	w := id<<idShift | tiers
	if n.meta&metaAlt != 0 {
		if _, ok := sh.alt[altKey{n.seq, id}]; ok {
			w |= altBit
		}
	}
	return w
}

// getHolder returns source id's holder word.
func (sh *shard) getHolder(n *node, id uint32) (uint32, bool) {
	switch {
	case n.meta&metaMore == 0:
		for hs := n.packed(); hs != 0; hs >>= inlineBits {
			if w := uint32(hs & inlineMask); w>>idShift == id {
				return w, true
			}
		}
		return 0, false
	case sh.isDense(n):
		ws := sh.denseWords(n)
		if int(id/nibbles) >= len(ws) {
			return 0, false
		}
		if m := ws[id/nibbles] >> (4 * (id % nibbles)) & tierMask; m != 0 {
			return sh.denseWord(n, id, m), true
		}
		return 0, false
	}
	ws := sh.sparseWords(n)
	if i, ok := search(ws, id); ok {
		return ws[i], true
	}
	return 0, false
}

// putHolder inserts w, or replaces the word of w's source.
func (sh *shard) putHolder(n *node, w uint32) {
	id := w >> idShift
	if n.meta&metaMore == 0 {
		if n.putInline(w) {
			return
		}
		// A fourth holder, or one numbered too high: to a sparse block.
		var buf [inlineMax + 1]uint32 // room to insert
		ws := n.appendInline(buf[:0])
		i, _ := search(ws, id) // absent: a word of a present source would fit
		ws = slices.Insert(ws, i, w)
		off := sh.alloc(classFor(uint32(len(ws))))
		sh.arena[off] = uint32(len(ws))
		copy(sh.arena[off+2:], ws)
		n.h0, n.h1 = off, 0
		n.meta |= metaMore
		return
	}
	if sh.isDense(n) {
		sh.putDense(n, id, w&tierMask)
		return
	}
	ws := sh.sparseWords(n)
	i, ok := search(ws, id)
	if ok {
		ws[i] = w
		return
	}
	l := uint32(len(ws))
	if l+1 >= denseAt {
		span := max(id, ws[l-1]>>idShift) + 1
		if (span+nibbles-1)/nibbles <= l+1 {
			sh.toDense(n)
			sh.putDense(n, id, w&tierMask)
			return
		}
	}
	if class := sh.arena[n.h0+1]; l == classCap(class) {
		off := sh.alloc(class + 1)
		old := sh.sparseWords(n)
		dst := sh.arena[off+2 : off+2+l+1]
		copy(dst, old[:i])
		dst[i] = w
		copy(dst[i+1:], old[i:])
		sh.arena[off] = l + 1
		sh.release(n.h0)
		n.h0 = off
		return
	}
	base := int(n.h0) + 2
	copy(sh.arena[base+i+1:base+int(l)+1], sh.arena[base+i:base+int(l)])
	sh.arena[base+i] = w
	sh.arena[n.h0] = l + 1
}

func (sh *shard) putDense(n *node, id, tiers uint32) {
	if id/nibbles >= denseCap(sh.arena[n.h0+1]&^denseKind) {
		old, fp := sh.denseWords(n), sh.denseFP(n)
		off := sh.alloc(classFor(id/nibbles + 1 + fpWords))
		sh.arena[off+1] |= denseKind
		sh.arena[off] = sh.arena[n.h0]
		payload := sh.arena[off+2 : off+2+classCap(sh.arena[off+1]&^denseKind)]
		clear(payload[copy(payload, old):])
		sh.release(n.h0)
		n.h0 = off
		sh.addFP(n, fp)
	}
	k := n.h0 + 2 + id/nibbles
	shift := 4 * (id % nibbles)
	was := sh.arena[k] >> shift & tierMask
	if was == 0 {
		sh.arena[n.h0]++
	}
	sh.arena[k] = sh.arena[k]&^(tierMask<<shift) | tiers<<shift
	sh.addFP(n, fpOf(id, tiers)-fpOf(id, was))
}

// toDense turns n's sparse block dense.
func (sh *shard) toDense(n *node) {
	ws := sh.sparseWords(n)
	words := ws[len(ws)-1]>>idShift/nibbles + 1
	off := sh.alloc(classFor(words + fpWords))
	sh.arena[off+1] |= denseKind
	sh.arena[off] = uint32(len(ws))
	payload := sh.arena[off+2 : off+2+classCap(sh.arena[off+1]&^denseKind)]
	clear(payload)
	var fp uint64
	for _, w := range ws {
		id := w >> idShift
		payload[id/nibbles] |= w & tierMask << (4 * (id % nibbles))
		fp += fpOf(id, w&tierMask)
	}
	at := len(payload) - fpWords
	payload[at], payload[at+1] = uint32(fp), uint32(fp>>32)
	sh.release(n.h0)
	n.h0 = off
}

// toSparse turns n's dense block sparse, or inline.
func (sh *shard) toSparse(n *node) {
	ws := sh.appendHolders(sh.tmp[:0], n)
	sh.tmp = ws
	old := n.h0
	if fitsInline(ws) {
		n.setInline(ws)
		n.meta &^= metaMore
	} else {
		off := sh.alloc(classFor(uint32(len(ws))))
		sh.arena[off] = uint32(len(ws))
		copy(sh.arena[off+2:], ws)
		n.h0 = off
	}
	sh.release(old)
}

// delHolder removes source id's holder.
func (sh *shard) delHolder(n *node, id uint32) {
	if n.meta&metaMore == 0 {
		var buf [inlineMax]uint32
		ws := n.appendInline(buf[:0])
		if i, ok := search(ws, id); ok {
			n.setInline(slices.Delete(ws, i, i+1))
		}
		return
	}
	if sh.isDense(n) {
		ws := sh.denseWords(n)
		if int(id/nibbles) >= len(ws) {
			return
		}
		k, shift := id/nibbles, 4*(id%nibbles)
		was := ws[k] >> shift & tierMask
		if was == 0 {
			return
		}
		ws[k] &^= tierMask << shift
		sh.addFP(n, -fpOf(id, was))
		if sh.arena[n.h0]--; sh.arena[n.h0] < sparseAt {
			sh.toSparse(n)
		}
		return
	}
	ws := sh.sparseWords(n)
	i, ok := search(ws, id)
	if !ok {
		return
	}
	l := uint32(len(ws)) - 1
	copy(ws[i:], ws[i+1:])
	ws = ws[:l]
	switch class := sh.arena[n.h0+1]; {
	case fitsInline(ws):
		off := n.h0
		n.setInline(ws)
		n.meta &^= metaMore
		sh.release(off)
	case class > 1 && l <= classCap(class)/4:
		off := sh.alloc(classFor(2 * l))
		copy(sh.arena[off+2:], ws)
		sh.arena[off] = l
		sh.release(n.h0)
		n.h0 = off
	default:
		sh.arena[n.h0] = l
	}
}

// appendHolders appends n's holder words, sorted by source id.
func (sh *shard) appendHolders(dst []uint32, n *node) []uint32 {
	switch {
	case n.meta&metaMore == 0:
		return n.appendInline(dst)
	case sh.isDense(n):
		for k, nw := range sh.denseWords(n) {
			for nw != 0 {
				j := uint32(bits.TrailingZeros32(nw)) / 4
				m := nw >> (4 * j) & tierMask
				nw &^= tierMask << (4 * j)
				dst = append(dst, sh.denseWord(n, uint32(k)*nibbles+j, m))
			}
		}
		return dst
	}
	return append(dst, sh.sparseWords(n)...)
}

// holders returns n's holders as stored, for Match: holder words, or for a
// dense set its tier-mask words (dense true). Inline words are copied to
// buf; the others alias the arena, valid while the shard is read-locked.
func (sh *shard) holders(n *node, buf *[inlineMax]uint32) (ws []uint32, dense bool) {
	if n.meta&metaMore == 0 {
		return n.appendInline(buf[:0]), false
	}
	off := n.h0 + 2
	if kind := sh.arena[n.h0+1]; kind&denseKind != 0 {
		end := off + denseCap(kind&^denseKind)
		return sh.arena[off:end:end], true
	}
	end := off + sh.arena[n.h0]
	return sh.arena[off:end:end], false
}

// engineOf returns the engine hash that holder word w of n recorded.
func (sh *shard) engineOf(n *node, w uint32) uint64 {
	if w&altBit != 0 {
		return sh.alt[altKey{n.seq, w >> idShift}]
	}
	return n.engine
}

// holds returns the position of the node seq and source id's holder word,
// if id holds it under engine hash e.
func (sh *shard) holds(seq uint64, id uint32, e uint64) (pos int, w uint32, ok bool) {
	pos, ok = sh.find(seq)
	if !ok {
		return 0, 0, false
	}
	n := sh.at(pos)
	w, ok = sh.getHolder(n, id)
	if !ok || sh.engineOf(n, w) != e {
		return 0, 0, false
	}
	return pos, w, true
}

// setEngine records e as the engine hash of holder word w of n, stores the
// word and returns it as stored (its alt bit set or not).
func (sh *shard) setEngine(n *node, w uint32, e uint64) uint32 {
	k := altKey{n.seq, w >> idShift}
	if e == n.engine {
		if w&altBit != 0 {
			delete(sh.alt, k)
			w &^= altBit
		}
	} else {
		if sh.alt == nil {
			sh.alt = make(map[altKey]uint64)
		}
		sh.alt[k] = e
		w |= altBit
		n.meta |= metaAlt
	}
	sh.putHolder(n, w)
	return w
}

// disagree appends the ids of n's holders, other than id, whose engine hash
// is not e.
func (sh *shard) disagree(dst []uint32, n *node, id uint32, e uint64) []uint32 {
	if e == n.engine && n.meta&metaAlt == 0 {
		return dst // every holder agrees with node.engine
	}
	sh.tmp = sh.appendHolders(sh.tmp[:0], n)
	for _, w := range sh.tmp {
		if w>>idShift != id && sh.engineOf(n, w) != e {
			dst = append(dst, w>>idShift)
		}
	}
	return dst
}

// unhold clears tiers of holder word w of the node at pos and frees what
// nobody holds. It reports whether the holder is gone and whether the node is.
func (sh *shard) unhold(pos int, w, tiers uint32) (holderGone, nodeGone bool) {
	n := sh.at(pos)
	if w&tiers&tierMask == 0 {
		return false, false
	}
	if w&^tiers&tierMask != 0 {
		sh.putHolder(n, w&^tiers)
		return false, false
	}
	if w&altBit != 0 {
		delete(sh.alt, altKey{n.seq, w >> idShift})
	}
	sh.delHolder(n, w>>idShift)
	if sh.holderCount(n) > 0 {
		return true, false
	}
	if n.meta&metaMore != 0 {
		sh.release(n.h0)
	}
	sh.freeNode(pos)
	return true, true
}
