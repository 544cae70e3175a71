package index

import (
	"math/rand/v2"
	"testing"
)

// TestStoreFollowsChains checks the placement a match relies on: a chain
// stored node after node fills runs in order, and a second chain from the
// same parent starts a run of its own.
func TestStoreFollowsChains(t *testing.T) {
	var st store
	a := st.alloc(noRef)
	for i := uint32(1); i < runLen; i++ {
		if got := st.alloc(a + i - 1); got != a+i {
			t.Fatalf("block %d of the chain at %d, want %d", i, got, a+i)
		}
	}
	if got := st.alloc(a + runLen - 1); got/runLen == a/runLen {
		t.Fatalf("a full run took slot %d", got)
	}
	b := st.alloc(a) // a sibling: a+1 is taken
	if b/runLen == a/runLen {
		t.Fatalf("a sibling went to slot %d, in its parent's full run", b)
	}
	if got := st.alloc(b); got != b+1 {
		t.Fatalf("the sibling's child at %d, want %d", got, b+1)
	}
}

// TestStoreLeavesChainsRoom checks that once the store is sparse, a new
// chain, which then takes a single free slot, leaves the free slots right
// after other chains' last nodes: there they grow, node after node.
func TestStoreLeavesChainsRoom(t *testing.T) {
	var st store
	var tails []uint32
	for int(st.bump) < 2*st.live+4*runLen { // each chain a run of its own
		tails = append(tails, st.alloc(noRef))
	}
	for range 2 * len(tails) { // sparse now: single free slots
		if ref := st.alloc(noRef); ref%runLen <= openGap {
			t.Fatalf("a new chain took slot %d, %d after its run's start", ref, ref%runLen)
		}
	}
	for _, tail := range tails {
		if got := st.alloc(tail); got != tail+1 {
			t.Fatalf("the chain ending at %d went on at %d", tail, got)
		}
	}
}

// TestStoreChurn allocates and frees at random against a model and checks
// that no slot is handed out twice, that the counts agree, and that churn
// does not grow the store past about twice what lives in it.
func TestStoreChurn(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	var st store
	live := map[uint32]bool{}
	var refs []uint32
	peak := 0
	for step := range 200_000 {
		// Phases: grow to a few thousand, shrink, grow again.
		target := 4000
		if step/20_000%2 == 1 {
			target = 300
		}
		if len(refs) > 0 && (len(refs) > target || r.IntN(3) == 0) {
			k := r.IntN(len(refs))
			ref := refs[k]
			refs[k] = refs[len(refs)-1]
			refs = refs[:len(refs)-1]
			delete(live, ref)
			*st.at(ref) = node{}
			st.release(ref)
			continue
		}
		after := noRef
		if len(refs) > 0 && r.IntN(4) > 0 {
			after = refs[r.IntN(len(refs))]
		}
		ref := st.alloc(after)
		if live[ref] {
			t.Fatalf("step %d: slot %d handed out twice", step, ref)
		}
		if ref >= st.bump {
			t.Fatalf("step %d: slot %d past the bump %d", step, ref, st.bump)
		}
		st.at(ref).seq = uint64(ref) + 1
		live[ref] = true
		refs = append(refs, ref)
		peak = max(peak, len(refs))
	}
	if st.live != len(live) {
		t.Fatalf("store counts %d live, model %d", st.live, len(live))
	}
	for ref := uint32(0); ref < st.bump; ref++ {
		if st.taken(ref) != live[ref] {
			t.Fatalf("slot %d taken %v, model %v", ref, st.taken(ref), live[ref])
		}
	}
	if limit := uint32(2*peak + 8*runLen); st.bump > limit {
		t.Fatalf("store grew to %d slots for at most %d live", st.bump, peak)
	}
}
