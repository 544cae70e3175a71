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
// than a random line a block: on the bench workload, 4 jumps for a
// 128-block prompt (docs/benchmarks.md, eleventh session).
//
// Node memory is written under the shard lock of the node's identity, as
// before; the allocator's own state (which slot is taken) is under mu, and
// it never reads node memory, which it does not lock.
const (
	runLen    = 32
	chunkBase = 1024 // chunk c holds chunkBase<<c nodes
	numChunks = 22   // up to chunkBase * (2^22 - 1) nodes
	noRef     = ^uint32(0)
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
	freeRuns []uint32 // runs with no slot taken
	// freeSlots are slots freed in runs still in use: taken (lazily
	// checked) once the store holds twice what lives in it, so that churn
	// cannot grow it without bound.
	freeSlots []uint32
	live      int
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
	defer st.mu.Unlock()
	ref := noRef
	switch c := after + 1; {
	case after != noRef && c%runLen != 0 && c < st.bump && !st.taken(c):
		ref = c
	default:
		ref = st.freeRun()
		if ref == noRef && int(st.bump) >= 2*st.live+4*runLen {
			ref = st.freeSlot()
		}
	}
	if ref == noRef {
		ref = st.bump
		st.grow(ref + runLen)
		st.bump += runLen
	}
	st.used[ref/64] |= 1 << (ref % 64)
	st.runUsed[ref/runLen]++
	st.live++
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
		if st.runUsed[ref/runLen] == 0 {
			return ref
		}
	}
	return noRef
}

// freeSlot pops a free slot, noRef if none is left (entries taken again
// since they were freed are dropped as met).
func (st *store) freeSlot() uint32 {
	for n := len(st.freeSlots); n > 0; n-- {
		ref := st.freeSlots[n-1]
		st.freeSlots = st.freeSlots[:n-1]
		if !st.taken(ref) {
			return ref
		}
	}
	return noRef
}

// grow makes room for refs below end.
func (st *store) grow(end uint32) {
	for w := (int(end) + 63) / 64; len(st.used) < w; {
		st.used = append(st.used, 0)
	}
	for r := int(end / runLen); len(st.runUsed) < r; {
		st.runUsed = append(st.runUsed, 0)
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
	defer st.mu.Unlock()
	st.used[ref/64] &^= 1 << (ref % 64)
	st.live--
	run := ref / runLen
	if st.runUsed[run]--; st.runUsed[run] == 0 {
		st.freeRuns = append(st.freeRuns, run*runLen)
		return
	}
	st.freeSlots = append(st.freeSlots, ref)
}

// bytes estimates the store's memory; mapped is the part outside the heap.
func (st *store) bytes() (all, mapped int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, c := range st.chunks {
		all += int64(cap(c.nodes)) * 32
		mapped += c.at.mappedBytes()
	}
	all += int64(cap(st.used))*8 + int64(cap(st.runUsed)) + int64(cap(st.freeRuns)+cap(st.freeSlots))*4
	return all, mapped
}
