package mocker

import (
	"slices"
	"testing"
)

// TestPoolLRU walks the pool through a script of operations and checks the
// observable state after each one.
func TestPoolLRU(t *testing.T) {
	type op struct {
		do      string // alloc, release, register, acquire, evict
		id      int    // block for release/register/acquire; expected block for alloc
		key     uint64
		evicted uint64 // alloc: key expected evicted (0: none)
		ok      bool   // register/evict/alloc result
		avail   int    // available() afterwards
		cached  int    // cachedCount() afterwards
	}
	script := []op{
		{do: "alloc", id: 0, ok: true, avail: 2},
		{do: "alloc", id: 1, ok: true, avail: 1},
		{do: "alloc", id: 2, ok: true, avail: 0},
		{do: "alloc", ok: false, avail: 0},
		{do: "register", id: 0, key: 10, ok: true, avail: 0, cached: 1},
		{do: "register", id: 1, key: 11, ok: true, avail: 0, cached: 2},
		{do: "register", id: 2, key: 10, ok: false, avail: 0, cached: 2}, // duplicate key stays private
		{do: "release", id: 1, avail: 1, cached: 2},                      // 11 parked first
		{do: "release", id: 0, avail: 2, cached: 2},                      // then 10
		{do: "release", id: 2, avail: 3, cached: 2},                      // private: freed
		{do: "alloc", id: 2, ok: true, avail: 2, cached: 2},              // free list before eviction
		{do: "acquire", id: 1, avail: 1, cached: 2},                      // 11 in use again
		{do: "alloc", id: 0, evicted: 10, ok: true, avail: 0, cached: 1}, // LRU head is 10 now
		{do: "evict", key: 11, ok: true, avail: 0, cached: 0},            // referenced: leaves the cache only
		{do: "release", id: 1, avail: 1, cached: 0},                      // then it is freed
		{do: "evict", key: 11, ok: false, avail: 1, cached: 0},
	}
	p := newGPUPool(3, 8)
	for i, o := range script {
		switch o.do {
		case "alloc":
			id, ev, has, ok := p.alloc()
			if ok != o.ok || (ok && id != o.id) || has != (o.evicted != 0) || ev != o.evicted {
				t.Fatalf("step %d alloc: got id %d evicted %d/%v ok %v, want id %d evicted %d ok %v", i, id, ev, has, ok, o.id, o.evicted, o.ok)
			}
		case "release":
			p.release(o.id)
		case "acquire":
			p.acquire(o.id)
		case "register":
			if got := p.register(o.id, o.key); got != o.ok {
				t.Fatalf("step %d register: got %v", i, got)
			}
		case "evict":
			if got := p.evict(o.key); got != o.ok {
				t.Fatalf("step %d evict: got %v", i, got)
			}
		}
		if p.available() != o.avail || p.cachedCount() != o.cached {
			t.Fatalf("step %d %s: available %d cached %d, want %d %d", i, o.do, p.available(), p.cachedCount(), o.avail, o.cached)
		}
	}
}

func TestPoolClear(t *testing.T) {
	p := newGPUPool(4, 8)
	for k := range uint64(4) {
		id, _, _, _ := p.alloc()
		p.register(id, 100+k)
		if k%2 == 0 {
			p.release(id)
		}
	}
	keys := p.clear()
	slices.Sort(keys)
	if !slices.Equal(keys, []uint64{100, 101, 102, 103}) {
		t.Fatalf("clear returned %v", keys)
	}
	if p.cachedCount() != 0 || p.available() != 2 || p.used() != 2 {
		t.Fatalf("after clear: cached %d available %d used %d", p.cachedCount(), p.available(), p.used())
	}
	if _, ok := p.lookup(101); ok {
		t.Fatal("cleared key still found")
	}
}
