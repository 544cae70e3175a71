package index

import (
	"slices"
	"sync"
	"sync/atomic"
)

// Layout. Nodes live in per-shard slabs addressed by uint32, never by
// pointer: the GC has nothing to scan and a reference costs 4 bytes.
const (
	shardBits = 6
	numShards = 1 << shardBits

	slotBits = 26 // a table entry is (slot+1) | tag<<slotBits
	slotMask = 1<<slotBits - 1
	maxSlot  = slotMask - 1
	tagBits  = 32 - slotBits

	// A holder word is id<<idShift | altBit | tier bits.
	idShift     = 5
	altBit      = 1 << 4
	tierMask    = 1<<numTiers - 1
	maxSourceID = 1<<(32-idShift) - 1

	// depth keeps a flag in its top bit: some holder reported an engine hash
	// other than node.engine.
	depthAlt = 1 << 31
	maxDepth = depthAlt - 1
)

// ref names a node: its shard and its slot in that shard's slab.
type ref uint32

func mkref(sh, slot uint32) ref { return ref(sh<<slotBits | slot) }
func (r ref) shard() uint32     { return uint32(r) >> slotBits }
func (r ref) slot() uint32      { return uint32(r) & slotMask }

func shardOf(seq uint64) uint32 { return uint32(seq >> (64 - shardBits)) }
func tagOf(seq uint64) uint32   { return uint32(seq>>32) & (1<<tagBits - 1) }

// node is one block identity: 32 bytes whoever holds it. A node exists
// while at least one source holds it.
type node struct {
	seq    uint64 // rolling sequence hash: the identity
	engine uint64 // engine hash of the holder that created it
	stamp  uint32 // recency (atomic): logical time of the last match
	depth  uint32 // position from the root, and the depthAlt flag
	// h0 is the holder word while the node has one holder; with more,
	// more is the arena offset of a sorted block of holder words.
	h0   uint32
	more uint32
}

// Holder blocks in the arena are [len, class, words...] with room for
// 2<<class words. Offset 0 is never a block, so more == 0 means inline.
const arenaClasses = 27

func classCap(c uint32) uint32 { return 2 << c }

// shard is a part of the index selected by the top bits of the sequence
// hash. Its RWMutex is held for one block at a time, never across shards.
type shard struct {
	mu    sync.RWMutex
	tab   []uint32 // open addressing, linear probing; 0 = empty
	live  int
	nodes []node
	free  []uint32
	arena []uint32
	afree [arenaClasses][]uint32
	// alt keeps the engine hash of holders that disagree with node.engine,
	// keyed by slot<<32 | source id; rare (mixed hash seeds).
	alt map[uint64]uint64
	_   [64]byte // keeps neighbouring shards' mutexes off one cache line
}

func altKey(slot, id uint32) uint64 { return uint64(slot)<<32 | uint64(id) }

// find returns the slot of identity seq.
func (sh *shard) find(seq uint64) (uint32, bool) {
	if len(sh.tab) == 0 {
		return 0, false
	}
	mask := uint64(len(sh.tab) - 1)
	tag := tagOf(seq)
	for i := seq & mask; ; i = (i + 1) & mask {
		e := sh.tab[i]
		if e == 0 {
			return 0, false
		}
		if e>>slotBits == tag {
			if slot := e&slotMask - 1; sh.nodes[slot].seq == seq {
				return slot, true
			}
		}
	}
}

func (sh *shard) tabInsert(seq uint64, slot uint32) {
	if (sh.live+1)*4 > len(sh.tab)*3 {
		sh.grow()
	}
	mask := uint64(len(sh.tab) - 1)
	i := seq & mask
	for sh.tab[i] != 0 {
		i = (i + 1) & mask
	}
	sh.tab[i] = (slot + 1) | tagOf(seq)<<slotBits
}

func (sh *shard) grow() {
	old := sh.tab
	sh.tab = make([]uint32, max(64, 2*len(old)))
	mask := uint64(len(sh.tab) - 1)
	for _, e := range old {
		if e == 0 {
			continue
		}
		i := sh.nodes[e&slotMask-1].seq & mask
		for sh.tab[i] != 0 {
			i = (i + 1) & mask
		}
		sh.tab[i] = e
	}
}

// tabDelete removes seq with backward shifting, so lookups never meet
// tombstones.
func (sh *shard) tabDelete(seq uint64) {
	mask := uint64(len(sh.tab) - 1)
	i := seq & mask
	for {
		e := sh.tab[i]
		if e == 0 {
			return
		}
		if sh.nodes[e&slotMask-1].seq == seq {
			break
		}
		i = (i + 1) & mask
	}
	for j := i; ; {
		j = (j + 1) & mask
		e := sh.tab[j]
		if e == 0 {
			break
		}
		home := sh.nodes[e&slotMask-1].seq & mask
		// Move e back to the hole at i unless its home lies in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			sh.tab[i] = e
			i = j
		}
	}
	sh.tab[i] = 0
}

// newNode adds identity seq and returns its slot.
func (sh *shard) newNode(seq, engine uint64, depth, stamp uint32) uint32 {
	var slot uint32
	if n := len(sh.free); n > 0 {
		slot = sh.free[n-1]
		sh.free = sh.free[:n-1]
	} else {
		if len(sh.nodes) > maxSlot {
			panic("index: shard full") // 2^26 blocks per shard: memory runs out first
		}
		slot = uint32(len(sh.nodes))
		sh.nodes = append(sh.nodes, node{})
	}
	sh.nodes[slot] = node{seq: seq, engine: engine, stamp: stamp, depth: depth}
	sh.tabInsert(seq, slot)
	sh.live++
	return slot
}

// freeNode drops a node without holders.
func (sh *shard) freeNode(slot uint32) {
	sh.tabDelete(sh.nodes[slot].seq)
	sh.nodes[slot] = node{}
	sh.free = append(sh.free, slot)
	sh.live--
}

// words returns the holder block of n (more != 0).
func (sh *shard) words(n *node) []uint32 {
	return sh.arena[n.more+2 : n.more+2+sh.arena[n.more]]
}

// holderCount returns how many sources hold n.
func (sh *shard) holderCount(n *node) int {
	switch {
	case n.more != 0:
		return int(sh.arena[n.more])
	case n.h0 != 0:
		return 1
	}
	return 0
}

// holder returns the i-th holder word of n.
func (sh *shard) holder(n *node, i int) uint32 {
	if n.more == 0 {
		return n.h0
	}
	return sh.arena[int(n.more)+2+i]
}

// findHolder returns the position of source id among n's holders, or where
// it would go.
func (sh *shard) findHolder(n *node, id uint32) (int, bool) {
	if n.more == 0 {
		if n.h0 == 0 {
			return 0, false
		}
		h := n.h0 >> idShift
		if h == id {
			return 0, true
		}
		if h < id {
			return 1, false
		}
		return 0, false
	}
	return slices.BinarySearchFunc(sh.words(n), id, func(w, id uint32) int {
		return int(w>>idShift) - int(id)
	})
}

func (sh *shard) setHolder(n *node, i int, w uint32) {
	if n.more == 0 {
		n.h0 = w
		return
	}
	sh.arena[int(n.more)+2+i] = w
}

func (sh *shard) alloc(class uint32) uint32 {
	if n := len(sh.afree[class]); n > 0 {
		off := sh.afree[class][n-1]
		sh.afree[class] = sh.afree[class][:n-1]
		return off
	}
	if len(sh.arena) == 0 {
		sh.arena = append(sh.arena, 0) // offset 0 means "no block"
	}
	off := uint32(len(sh.arena))
	need := 2 + int(classCap(class))
	sh.arena = slices.Grow(sh.arena, need)[:len(sh.arena)+need]
	sh.arena[off+1] = class
	return off
}

func (sh *shard) release(off uint32) {
	class := sh.arena[off+1]
	sh.arena[off] = 0
	sh.afree[class] = append(sh.afree[class], off)
}

// classFor returns the smallest class with room for n words.
func classFor(n uint32) uint32 {
	c := uint32(0)
	for classCap(c) < n {
		c++
	}
	return c
}

// insertHolder puts w at position i of n's sorted holders.
func (sh *shard) insertHolder(n *node, i int, w uint32) {
	switch {
	case n.more == 0 && n.h0 == 0:
		n.h0 = w
		return
	case n.more == 0:
		off := sh.alloc(0)
		a, b := n.h0, w
		if i == 0 {
			a, b = w, n.h0
		}
		sh.arena[off] = 2
		sh.arena[off+2], sh.arena[off+3] = a, b
		n.h0, n.more = 0, off
		return
	}
	l := sh.arena[n.more]
	if class := sh.arena[n.more+1]; l == classCap(class) {
		off := sh.alloc(class + 1)
		old := sh.words(n)
		dst := sh.arena[off+2 : off+2+l+1]
		copy(dst, old[:i])
		dst[i] = w
		copy(dst[i+1:], old[i:])
		sh.arena[off] = l + 1
		sh.release(n.more)
		n.more = off
		return
	}
	base := int(n.more) + 2
	copy(sh.arena[base+i+1:base+int(l)+1], sh.arena[base+i:base+int(l)])
	sh.arena[base+i] = w
	sh.arena[n.more] = l + 1
}

// deleteHolder drops position i of n's holders.
func (sh *shard) deleteHolder(n *node, i int) {
	if n.more == 0 {
		n.h0 = 0
		return
	}
	ws := sh.words(n)
	l := uint32(len(ws)) - 1
	copy(ws[i:], ws[i+1:])
	ws = ws[:l]
	switch class := sh.arena[n.more+1]; {
	case l == 1:
		n.h0 = ws[0]
		sh.release(n.more)
		n.more = 0
	case class > 0 && l <= classCap(class)/4:
		off := sh.alloc(classFor(2 * l))
		copy(sh.arena[off+2:], ws)
		sh.arena[off] = l
		sh.release(n.more)
		n.more = off
	default:
		sh.arena[n.more] = l
	}
}

// engineOf returns the engine hash holder word w recorded at slot.
func (sh *shard) engineOf(slot uint32, w uint32) uint64 {
	if w&altBit != 0 {
		return sh.alt[altKey(slot, w>>idShift)]
	}
	return sh.nodes[slot].engine
}

// holds reports whether source id holds slot under engine hash e, and its
// position.
func (sh *shard) holds(slot, id uint32, e uint64) (int, bool) {
	if int(slot) >= len(sh.nodes) {
		return 0, false
	}
	n := &sh.nodes[slot]
	i, ok := sh.findHolder(n, id)
	if !ok || sh.engineOf(slot, sh.holder(n, i)) != e {
		return 0, false
	}
	return i, true
}

// setEngine records e as the engine hash of the holder at position i.
func (sh *shard) setEngine(slot uint32, i int, w uint32, e uint64) uint32 {
	n := &sh.nodes[slot]
	id := w >> idShift
	if e == n.engine {
		if w&altBit != 0 {
			delete(sh.alt, altKey(slot, id))
			w &^= altBit
		}
	} else {
		if sh.alt == nil {
			sh.alt = make(map[uint64]uint64)
		}
		sh.alt[altKey(slot, id)] = e
		w |= altBit
		n.depth |= depthAlt
	}
	sh.setHolder(n, i, w)
	return w
}

// disagree appends the ids of n's holders, other than id, whose engine hash
// is not e.
func (sh *shard) disagree(dst []uint32, slot, id uint32, e uint64) []uint32 {
	n := &sh.nodes[slot]
	if e == n.engine && n.depth&depthAlt == 0 {
		return dst // every holder agrees with node.engine
	}
	for i, c := 0, sh.holderCount(n); i < c; i++ {
		w := sh.holder(n, i)
		if w>>idShift != id && sh.engineOf(slot, w) != e {
			dst = append(dst, w>>idShift)
		}
	}
	return dst
}

// unhold clears tiers of holder i at slot and frees what nobody holds.
// It reports whether the holder is gone and whether the node is.
func (sh *shard) unhold(slot uint32, i int, tiers uint32) (holderGone, nodeGone bool) {
	n := &sh.nodes[slot]
	w := sh.holder(n, i)
	if w&tiers&tierMask == 0 {
		return false, false
	}
	if w&^tiers&tierMask != 0 {
		sh.setHolder(n, i, w&^tiers)
		return false, false
	}
	if w&altBit != 0 {
		delete(sh.alt, altKey(slot, w>>idShift))
	}
	sh.deleteHolder(n, i)
	if sh.holderCount(n) > 0 {
		return true, false
	}
	sh.freeNode(slot)
	return true, true
}

// loadStamp reads a node's recency; matchers write it under the read lock.
func (n *node) loadStamp() uint32 { return atomic.LoadUint32(&n.stamp) }

// touch raises a node's recency to now.
func (n *node) touch(now uint32) {
	if atomic.LoadUint32(&n.stamp) < now {
		atomic.StoreUint32(&n.stamp, now)
	}
}

// bytes estimates the shard's memory.
func (sh *shard) bytes() int64 {
	b := int64(cap(sh.tab))*4 + int64(cap(sh.nodes))*32 + int64(cap(sh.free))*4 + int64(cap(sh.arena))*4
	for _, f := range sh.afree {
		b += int64(cap(f)) * 4
	}
	return b + int64(len(sh.alt))*32
}
