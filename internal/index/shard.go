// This file holds the shard layout: nodes, the directory of identities and its probing.

package index

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// Layout. A node lives in the index's store (store.go), at a position
// that follows its chain; each shard's directory maps an identity to it.
//
// Shards: enough that writers of different sources rarely meet on one
// lock, few enough that a Match, which read-locks every shard, pays little
// for the locks: each RLock and RUnlock is an atomic on a shared cache
// line.
const (
	shardBits = 4
	numShards = 1 << shardBits

	// A holder word is id<<idShift | altBit | tier bits.
	idShift     = 5
	altBit      = 1 << 4
	tierMask    = 1<<numTiers - 1
	maxSourceID = 1<<(32-idShift) - 1

	// meta keeps the depth and two flags.
	metaAlt  = 1 << 31 // some holder reported an engine hash other than node.engine
	metaMore = 1 << 30 // holders are in the arena at h0, not inline
	maxDepth = metaMore - 1
)

func shardOf(seq uint64) uint32 { return uint32(seq >> (64 - shardBits)) }

// node is one block identity: 32 bytes whoever holds it. A node exists
// while at least one source holds it; seq 0 marks an empty table slot.
type node struct {
	seq    uint64 // rolling sequence hash: the identity
	engine uint64 // engine hash of the holder that created it
	stamp  uint32 // recency (atomic): epoch of the last match through it
	meta   uint32 // depth from the root, metaAlt, metaMore
	// Up to three holder words inline (inline.go); with metaMore, h0 is the
	// arena offset of a block of holder words (holders.go).
	h0, h1 uint32
}

func (n *node) depth() uint32 { return n.meta & maxDepth }

// shard is a part of the index selected by the top bits of the sequence
// hash: its directory maps identities to their nodes' refs in the store.
// Writers lock one shard at a time; readers that lock several take them in
// ascending order.
type shard struct {
	mu    sync.RWMutex
	dir   []dirEnt // power of two; linear probing from seq's low bits
	dirAt *mapping // dir's memory when mapped (bigmem.go)
	live  int
	nodes *store // the index's, shared by every shard
	arena []uint32
	afree [arenaClasses][]uint32
	// alt keeps the engine hash of holders that disagree with node.engine;
	// rare (mixed hash seeds).
	alt map[altKey]uint64
	tmp []uint32 // writer scratch
	// pf locates dir for prefetching without the lock: a store asks for
	// its blocks' lines before it takes each block's lock. A prefetch of
	// a directory grow has just replaced is harmless.
	pf atomic.Pointer[tabAddr]
	_  [64]byte // keeps neighbouring shards' mutexes off one cache line
}

// dirEnt is a directory entry: 16 bytes, four to a cache line.
type dirEnt struct {
	seq uint64 // 0: empty
	ref uint32
	_   uint32
}

// tabAddr is where a shard's directory starts and its mask, for
// prefetching: an address, not a pointer, so it keeps no table alive.
type tabAddr struct {
	base uintptr
	mask uint64
}

// addr returns the address of identity seq's home entry.
func (a *tabAddr) addr(seq uint64) uintptr {
	return a.base + uintptr(home(seq, a.mask))*unsafe.Sizeof(dirEnt{})
}

type altKey struct {
	seq uint64
	id  uint32
}

// home returns where the probe for identity seq starts: the first entry of
// a cache line (a directory is a power of two of 16-byte entries, at least
// 16), so that the line a lookup loads first holds the four entries where
// most identities sit.
func home(seq, mask uint64) uint64 { return seq & mask &^ 3 }

// find returns the directory position of identity seq.
func (sh *shard) find(seq uint64) (int, bool) {
	if len(sh.dir) == 0 {
		return 0, false
	}
	mask := uint64(len(sh.dir) - 1)
	for i := home(seq, mask); ; i = (i + 1) & mask {
		switch sh.dir[i].seq {
		case seq:
			return int(i), true
		case 0:
			return 0, false
		}
	}
}

// at returns the node of the directory entry at pos.
func (sh *shard) at(pos int) *node { return sh.nodes.at(sh.dir[pos].ref) }

func (sh *shard) grow() {
	old, oldAt := sh.dir, sh.dirAt
	sh.dir, sh.dirAt = makeTable[dirEnt](max(16, 2*len(old)))
	mask := uint64(len(sh.dir) - 1)
	sh.pf.Store(&tabAddr{uintptr(unsafe.Pointer(&sh.dir[0])), mask})
	for k := range old {
		if old[k].seq == 0 {
			continue
		}
		i := home(old[k].seq, mask)
		for sh.dir[i].seq != 0 {
			i = (i + 1) & mask
		}
		sh.dir[i] = old[k]
	}
	oldAt.free()
}

// newNode adds identity seq (not present), its node right after the node
// at ref after if that slot is free (noRef: anywhere), and returns its
// directory position.
func (sh *shard) newNode(seq, engine uint64, depth, stamp, after uint32) int {
	if (sh.live+1)*4 > len(sh.dir)*3 {
		sh.grow()
	}
	mask := uint64(len(sh.dir) - 1)
	i := home(seq, mask)
	for sh.dir[i].seq != 0 {
		i = (i + 1) & mask
	}
	ref := sh.nodes.alloc(after)
	*sh.nodes.at(ref) = node{seq: seq, engine: engine, stamp: stamp, meta: depth}
	sh.dir[i] = dirEnt{seq: seq, ref: ref}
	sh.live++
	return int(i)
}

// freeNode drops the node of the entry at position i, which has no
// holders, shifting later entries of its probe run back so lookups never
// meet tombstones. Positions of other entries may change; refs do not.
func (sh *shard) freeNode(i int) {
	ref := sh.dir[i].ref
	*sh.nodes.at(ref) = node{}
	sh.nodes.release(ref)
	mask := len(sh.dir) - 1
	for j := i; ; {
		j = (j + 1) & mask
		seq := sh.dir[j].seq
		if seq == 0 {
			break
		}
		h := int(home(seq, uint64(mask)))
		// Move j back to the hole at i unless its home lies in (i, j].
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			sh.dir[i] = sh.dir[j]
			i = j
		}
	}
	sh.dir[i] = dirEnt{}
	sh.live--
}

// loadStamp reads a node's recency; matchers write it under the read lock.
func (n *node) loadStamp() uint32 { return atomic.LoadUint32(&n.stamp) }

// touch raises a node's recency to now.
func (n *node) touch(now uint32) {
	if atomic.LoadUint32(&n.stamp) < now {
		atomic.StoreUint32(&n.stamp, now)
	}
}

// mapped is the shard's directory memory outside the Go heap.
func (sh *shard) mapped() int64 { return sh.dirAt.mappedBytes() }

// bytes estimates the shard's memory, its nodes (in the store) aside.
func (sh *shard) bytes() int64 {
	b := int64(cap(sh.dir))*16 + int64(cap(sh.arena))*4
	for _, f := range sh.afree {
		b += int64(cap(f)) * 4
	}
	return b + int64(len(sh.alt))*40
}
