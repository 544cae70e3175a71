// This file holds each source's table from engine hashes to the identities they stored.

package index

import "unsafe"

// engineTable maps one source's engine hashes to the identities it stored
// them at: open addressing with linear probing over 16-byte slots. Unlike a
// Go map, its home slot can be loaded without a lookup, which lets a store
// take the cache misses of all its blocks at once (Index.prefetch).
//
// Identity 0 never occurs (zeroSeq stands in), so seq 0 marks an empty slot.
// Engine hashes are arbitrary (small test values, truncated digests), so
// they are multiplied into a position rather than masked.
type engineTable struct {
	slots []engineSlot // power of two
	shift uint8        // 64 - log2(len(slots))
	n     int
}

type engineSlot struct {
	e, seq uint64
}

func (t *engineTable) home(e uint64) uint64 {
	return (e * 0x9e3779b97f4a7c15) >> t.shift
}

func (t *engineTable) len() int { return t.n }

func (t *engineTable) get(e uint64) (uint64, bool) {
	if t.n == 0 {
		return 0, false
	}
	mask := uint64(len(t.slots) - 1)
	for i := t.home(e); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.seq == 0 {
			return 0, false
		}
		if s.e == e {
			return s.seq, true
		}
	}
}

// addr returns the address of e's home slot, for prefetching; 0 if the
// table is empty.
func (t *engineTable) addr(e uint64) uintptr {
	if len(t.slots) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(&t.slots[t.home(e)]))
}

// put maps e to seq, replacing any mapping of e.
func (t *engineTable) put(e, seq uint64) { t.swap(e, seq) }

// swap maps e to seq and returns what e mapped to before.
func (t *engineTable) swap(e, seq uint64) (old uint64, had bool) {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.grow()
	}
	mask := uint64(len(t.slots) - 1)
	i := t.home(e)
	for ; t.slots[i].seq != 0; i = (i + 1) & mask {
		if t.slots[i].e == e {
			old, t.slots[i].seq = t.slots[i].seq, seq
			return old, true
		}
	}
	t.slots[i] = engineSlot{e, seq}
	t.n++
	return 0, false
}

func (t *engineTable) grow() {
	old := t.slots
	size := max(8, 2*len(old))
	t.slots = make([]engineSlot, size)
	t.shift = uint8(64 - log2(size))
	mask := uint64(size - 1)
	for _, s := range old {
		if s.seq == 0 {
			continue
		}
		i := t.home(s.e)
		for t.slots[i].seq != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}

func log2(n int) int {
	k := 0
	for 1<<k < n {
		k++
	}
	return k
}

// del removes e, shifting later entries of its probe run back.
func (t *engineTable) del(e uint64) {
	if t.n == 0 {
		return
	}
	mask := uint64(len(t.slots) - 1)
	i := t.home(e)
	for ; ; i = (i + 1) & mask {
		if t.slots[i].seq == 0 {
			return
		}
		if t.slots[i].e == e {
			break
		}
	}
	for j := i; ; {
		j = (j + 1) & mask
		s := t.slots[j]
		if s.seq == 0 {
			break
		}
		// Move j back to the hole at i unless its home lies in (i, j].
		if h := t.home(s.e); (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			t.slots[i] = s
			i = j
		}
	}
	t.slots[i] = engineSlot{}
	t.n--
}

// entries appends a snapshot of the mappings to dst, so that callers may
// change the table while they walk it.
func (t *engineTable) entries(dst []engineSlot) []engineSlot {
	for _, s := range t.slots {
		if s.seq != 0 {
			dst = append(dst, s)
		}
	}
	return dst
}

// reset empties the table and releases its memory.
func (t *engineTable) reset() { *t = engineTable{} }

func (t *engineTable) bytes() int64 { return int64(cap(t.slots)) * 16 }
