package index

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// Layout. A node lives inline in its shard's open-addressing table, so that
// a lookup costs one cache line: matching walks a request block by block,
// and each block is a likely cache miss.
//
// Shards: enough that writers of different sources rarely meet on one
// lock, few enough that a Match, which read-locks every shard its request
// may visit (all of them for a long request), pays little for the locks:
// each RLock and RUnlock is an atomic on a shared cache line.
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
// hash. Writers lock one shard at a time; readers that lock several take
// them in ascending order.
type shard struct {
	mu    sync.RWMutex
	tab   []node   // power of two; linear probing from seq's low bits
	tabAt *mapping // tab's memory when mapped (bigmem.go)
	live  int
	arena []uint32
	afree [arenaClasses][]uint32
	// alt keeps the engine hash of holders that disagree with node.engine;
	// rare (mixed hash seeds).
	alt map[altKey]uint64
	tmp []uint32 // writer scratch
	// pf locates tab for prefetching without the lock: a store asks for
	// its blocks' lines before it takes each block's lock. A prefetch of
	// a table grow has just replaced is harmless.
	pf atomic.Pointer[tabAddr]
	_  [64]byte // keeps neighbouring shards' mutexes off one cache line
}

// tabAddr is where a shard's table starts and its mask, for prefetching:
// an address, not a pointer, so it keeps no table alive.
type tabAddr struct {
	base uintptr
	mask uint64
}

// addr returns the address of identity seq's home slot.
func (a *tabAddr) addr(seq uint64) uintptr {
	return a.base + uintptr(home(seq, a.mask))*unsafe.Sizeof(node{})
}

type altKey struct {
	seq uint64
	id  uint32
}

// home returns where the probe for identity seq starts: the first slot of
// a cache line (a node is 32 bytes, a table a power of two of them, at
// least 16), so that the line a lookup loads first holds the two slots
// where most nodes sit: at the index's load factor, 89% of nodes, against
// 63% for probes starting anywhere.
func home(seq, mask uint64) uint64 { return seq & mask &^ 1 }

// find returns the table position of identity seq.
func (sh *shard) find(seq uint64) (int, bool) {
	if len(sh.tab) == 0 {
		return 0, false
	}
	mask := uint64(len(sh.tab) - 1)
	for i := home(seq, mask); ; i = (i + 1) & mask {
		switch sh.tab[i].seq {
		case seq:
			return int(i), true
		case 0:
			return 0, false
		}
	}
}

// slot returns the position of identity seq if it is in the first line of
// its probe, else the second slot of that line, computed without a branch
// on the table (shard not empty): Match uses it on nodes still in flight.
func (sh *shard) slot(seq uint64) uint64 {
	pos := home(seq, uint64(len(sh.tab)-1))
	d := sh.tab[pos].seq ^ seq
	return pos + (d|-d)>>63 // d|-d has its top bit set iff d != 0
}

func (sh *shard) grow() {
	old, oldAt := sh.tab, sh.tabAt
	sh.tab, sh.tabAt = makeTable[node](max(16, 2*len(old)))
	mask := uint64(len(sh.tab) - 1)
	sh.pf.Store(&tabAddr{uintptr(unsafe.Pointer(&sh.tab[0])), mask})
	for k := range old {
		if old[k].seq == 0 {
			continue
		}
		i := home(old[k].seq, mask)
		for sh.tab[i].seq != 0 {
			i = (i + 1) & mask
		}
		sh.tab[i] = old[k]
	}
	oldAt.free()
}

// newNode adds identity seq (not present) and returns its position.
func (sh *shard) newNode(seq, engine uint64, depth, stamp uint32) int {
	if (sh.live+1)*4 > len(sh.tab)*3 {
		sh.grow()
	}
	mask := uint64(len(sh.tab) - 1)
	i := home(seq, mask)
	for sh.tab[i].seq != 0 {
		i = (i + 1) & mask
	}
	sh.tab[i] = node{seq: seq, engine: engine, stamp: stamp, meta: depth}
	sh.live++
	return int(i)
}

// freeNode drops the node at position i, which has no holders, shifting
// later entries of its probe run back so lookups never meet tombstones.
// Positions of other nodes may change.
func (sh *shard) freeNode(i int) {
	mask := len(sh.tab) - 1
	for j := i; ; {
		j = (j + 1) & mask
		seq := sh.tab[j].seq
		if seq == 0 {
			break
		}
		h := int(home(seq, uint64(mask)))
		// Move j back to the hole at i unless its home lies in (i, j].
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			sh.tab[i] = sh.tab[j]
			i = j
		}
	}
	sh.tab[i] = node{}
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

// mapped is the shard's memory outside the Go heap.
func (sh *shard) mapped() int64 { return sh.tabAt.mappedBytes() }

// bytes estimates the shard's memory.
func (sh *shard) bytes() int64 {
	b := int64(cap(sh.tab))*32 + int64(cap(sh.arena))*4
	for _, f := range sh.afree {
		b += int64(cap(f)) * 4
	}
	return b + int64(len(sh.alt))*40
}
