// This file holds the node store: fixed node positions in chunks, and its free-slot search.

package index

import (
	"math/bits"
	"sync"
)

// The node store. Nodes live here, at positions (refs) that never change
// while the node lives, and the shards' directories map identities to
// refs. Positions follow the chains: a new node goes right after its
// parent's when that slot is free, else at the start of a run of runLen
// slots of its own, whose slack the chain's later blocks fill. A match
// then walks a conversation in a few runs of consecutive lines, rather
// than a random line a block: on the bench workload, about 5 jumps for a
// 128-block prompt, and a cold 16-source match 8.06 → 6.98 µs against
// nodes placed by identity (indexbench's BenchmarkMatch16Cold, medians of
// 8 alternating rounds). Runs of 32 left 1.14 slots a node in a
// simulation; runs of 16 needed 7 jumps.
//
// Node memory is written under the shard lock of the node's identity; the
// allocator's own state (which slot is taken) is under mu, and it never
// reads node memory, which it does not lock.
const (
	runLen    = 32
	chunkBase = 1024 // chunk c holds chunkBase<<c nodes
	numChunks = 23   // chunkBase * (2^23 - 1) > 2^32 refs
	noRef     = ^uint32(0)
	maxNodes  = noRef - 2*runLen // refs stay clear of noRef
)

type store struct {
	// chunks are written once each, under mu, before any ref in them is
	// handed out; a reader reaches a chunk only through a ref it got under
	// a shard lock (or one in the same run), after that.
	chunks [numChunks]chunk

	mu       sync.Mutex
	bump     uint32   // runs are handed out from here
	used     []uint64 // a bit a slot
	runUsed  []uint8  // taken slots a run
	freeRuns []uint32 // runs that were empty when freed (some may be taken again)
	listed   []uint64 // a bit a run: in freeRuns
	// Once the store holds twice what lives in it, new chains take single
	// free slots, found from cursor on (clear of other chains' growth
	// where one is near, freeSlot): at least half the slots are free
	// then, so the search is short, and churn cannot grow the store.
	cursor uint32
	live   int
}

type chunk struct {
	nodes []node
	at    *mapping
}

// chunkOf returns the chunk of ref and ref's offset in it.
func chunkOf(ref uint32) (c int, off uint32) {
	q := ref/chunkBase + 1
	c = bits.Len32(q) - 1
	return c, ref - chunkBase*(1<<c-1)
}

// at returns the node at ref.
func (st *store) at(ref uint32) *node {
	c, off := chunkOf(ref)
	return &st.chunks[c].nodes[off]
}

// alloc takes a free slot, right after after if it can (noRef: none).
func (st *store) alloc(after uint32) uint32 {
	st.mu.Lock()
	ref := noRef
	if c := after + 1; after != noRef && c%runLen != 0 && c < st.bump && !st.taken(c) {
		ref = c
	} else if ref = st.freeRun(); ref == noRef {
		if int(st.bump) >= 2*st.live+4*runLen {
			ref = st.freeSlot()
		} else {
			if st.bump >= maxNodes {
				st.mu.Unlock()
				panic("index: 4 billion blocks indexed; set Config.MaxBlocks to bound the index")
			}
			ref = st.bump
			st.grow(ref + runLen)
			st.bump += runLen
		}
	}
	st.used[ref/64] |= 1 << (ref % 64)
	st.runUsed[ref/runLen]++
	st.live++
	st.mu.Unlock()
	return ref
}

func (st *store) taken(ref uint32) bool { return st.used[ref/64]&(1<<(ref%64)) != 0 }

// freeRun pops the start of a run nobody uses, noRef if none is left. A
// run freed may have been taken again since by a chain continuing into
// it: such entries are dropped as met.
func (st *store) freeRun() uint32 {
	for n := len(st.freeRuns); n > 0; n-- {
		ref := st.freeRuns[n-1]
		st.freeRuns = st.freeRuns[:n-1]
		run := ref / runLen
		st.listed[run/64] &^= 1 << (run % 64)
		if st.runUsed[run] == 0 {
			return ref
		}
	}
	return noRef
}

// freeSlot returns a free slot below bump, searching from the cursor; at
// least half of them are free when it is called. It prefers one with
// openGap free slots before it in its run (or fewer, all free, from the
// run's start), searching openScan words for it: the free slots right
// after a chain's last node are where that chain grows, and a new chain
// put there cuts it, so that a match jumps where it would have stepped.
func (st *store) freeSlot() uint32 {
	if ref, ok := st.scan(openGap, openScan); ok {
		return ref
	}
	if ref, ok := st.scan(0, len(st.used)); ok {
		return ref
	}
	panic("index: node store full below its bump") // unreachable: bump >= 2*live
}

// scan searches words of the slot bitmap from the cursor for a free slot
// below bump with gap free slots before it in its run (fewer, all free,
// from the run's start), and moves the cursor there.
func (st *store) scan(gap, words int) (uint32, bool) {
	n := uint32(len(st.used))
	for k := uint32(0); k < min(n, uint32(words)); k++ {
		w := (st.cursor/64 + k) % n
		free := ^st.used[w]
		open := free
		for g := 1; g <= gap && open != 0; g++ {
			open &= free<<g | runHeads[g]
		}
		if open == 0 {
			continue
		}
		// The lowest open bit: if it is past the bump, so is the rest.
		if ref := w*64 + uint32(bits.TrailingZeros64(open)); ref < st.bump {
			st.cursor = ref
			return ref, true
		}
	}
	return 0, false
}

// grow makes room for refs below end.
func (st *store) grow(end uint32) {
	for w := (int(end) + 63) / 64; len(st.used) < w; {
		st.used = append(st.used, 0)
	}
	for r := int(end / runLen); len(st.runUsed) < r; {
		st.runUsed = append(st.runUsed, 0)
	}
	for w := (int(end/runLen) + 63) / 64; len(st.listed) < w; {
		st.listed = append(st.listed, 0)
	}
	c, _ := chunkOf(end - 1)
	for k := 0; k <= c; k++ {
		if st.chunks[k].nodes == nil {
			st.chunks[k].nodes, st.chunks[k].at = makeTable[node](chunkBase << k)
		}
	}
}

// release frees ref, whose node the caller has cleared.
func (st *store) release(ref uint32) {
	st.mu.Lock()
	st.used[ref/64] &^= 1 << (ref % 64)
	st.live--
	run := ref / runLen
	if st.runUsed[run]--; st.runUsed[run] == 0 && st.listed[run/64]&(1<<(run%64)) == 0 {
		st.listed[run/64] |= 1 << (run % 64)
		st.freeRuns = append(st.freeRuns, run*runLen)
	}
	st.mu.Unlock()
}

// bytes estimates the store's memory; mapped is the part outside the heap.
// A mapped chunk counts the huge pages below the bump only: the last one
// is mostly reserved, not touched, and the kernel backs a page when it is
// first written.
func (st *store) bytes() (all, mapped int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for c, ch := range st.chunks {
		if ch.nodes == nil {
			continue
		}
		size := int64(len(ch.nodes)) * 32
		if ch.at != nil {
			start := int64(chunkBase) * (1<<c - 1)
			touched := (int64(st.bump) - start) * 32
			size = min(size, (touched+hugePage-1)/hugePage*hugePage)
			mapped += size
		}
		all += size
	}
	all += int64(cap(st.used)+cap(st.listed))*8 + int64(cap(st.runUsed)) + int64(cap(st.freeRuns))*4
	return all, mapped
}

// openGap and openScan: on the bench's workload, a new chain 12 free
// slots after any node, searched for over 64 words (4,096 slots), cut a
// conversation 4.80 times a prompt rather than 5.46 (8 and 16: 4.91 and
// 4.87); searching 256 words gained nothing (jumps counted over the 8,890
// conversation prompts of kvrouter bench index).
const (
	openGap  = 12
	openScan = 64
)

// runHeads[g] marks, in a word of the slot bitmap, the slots fewer than g
// after their run's start.
var runHeads = func() (m [runLen + 1]uint64) {
	for g := range m {
		for s := range 64 {
			if s%runLen < g {
				m[g] |= 1 << s
			}
		}
	}
	return m
}()
