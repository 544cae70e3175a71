// This file holds the large tables mapped outside the Go heap, on huge pages where granted.

package index

import (
	"runtime"
	"unsafe"
)

// Large tables (a shard's directory and the node store's chunks,
// megabytes in a big index) are mapped outside the Go heap, on huge pages
// where the kernel grants them. A match loads a hundred lines or so of
// them; with 4-KiB pages each is also a TLB miss, and the page walks hold
// up the prefetches a match issues ahead of its use (a prefetch waits for
// its walk). On 2-MiB pages the tables fit the TLB: about 10% off a cold
// 16-source match on a 2-vCPU VM (p50 10.8-11.5 → 9.7-10.4 µs over the
// bench index workload, alternating rounds). Holder arenas stay on the
// heap: smaller, and no faster mapped.
//
// The GC neither scans this memory nor frees it: a shard frees a directory
// when it replaces it (under its write lock, so no reader still uses it),
// the store never frees a chunk, and a cleanup frees what a dropped index
// still held.
const hugePage = 2 << 20

// mapAt is the size in bytes from which a table is mapped: a huge page
// (tests lower it to map small tables too).
var mapAt = hugePage

// mapping is a table's memory mapped outside the heap.
type mapping struct {
	mem     []byte // the whole mapping
	used    int    // bytes of it the table uses
	cleanup runtime.Cleanup
}

// makeTable returns a zeroed table of n Ts, which must hold no pointers, and
// its mapping: nil when it is on the Go heap (small, or no mapping to be
// had).
func makeTable[T any](n int) ([]T, *mapping) {
	size := n * int(unsafe.Sizeof(*new(T)))
	if size < mapAt {
		return make([]T, n), nil
	}
	mem, at, ok := mapHuge(size)
	if !ok {
		return make([]T, n), nil
	}
	m := &mapping{mem: mem, used: size}
	m.cleanup = runtime.AddCleanup(m, unmap, mem)
	return unsafe.Slice((*T)(at), n), m
}

// free unmaps m's memory, which nothing may use any more; nil is a no-op.
func (m *mapping) free() {
	if m == nil {
		return
	}
	m.cleanup.Stop()
	unmap(m.mem)
	m.mem = nil
}

// mappedBytes is the memory m's table uses.
func (m *mapping) mappedBytes() int64 {
	if m == nil {
		return 0
	}
	return int64(m.used)
}
