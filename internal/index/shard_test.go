package index

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestShardTable drives the open-addressing table with keys that collide on
// purpose (one home slot, or homes at the end of the table so that probes
// wrap) and checks every lookup against a set.
func TestShardTable(t *testing.T) {
	cases := []struct {
		name string
		key  func(r *rand.Rand) uint64
	}{
		{"uniform", func(r *rand.Rand) uint64 { return r.Uint64() &^ (63 << 58) }},
		{"one home", func(r *rand.Rand) uint64 { return r.Uint64()&(0xFFFF<<32) | 5 }},
		{"wrapping homes", func(r *rand.Rand) uint64 { return r.Uint64()&(0xFFFF<<32) | uint64(0xFFFFFFF0|r.IntN(16)) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, 7))
			var sh shard
			present := make(map[uint64]uint32)
			var keys []uint64
			for i := range 4000 {
				if len(keys) > 0 && r.IntN(5) < 2 {
					j := r.IntN(len(keys))
					k := keys[j]
					keys[j] = keys[len(keys)-1]
					keys = keys[:len(keys)-1]
					slot, ok := sh.find(k)
					if !ok || slot != present[k] {
						t.Fatalf("step %d: find(%#x) = %d %v, want %d", i, k, slot, ok, present[k])
					}
					sh.nodes[slot].h0 = 0
					sh.freeNode(slot)
					delete(present, k)
				} else {
					k := c.key(r)
					if _, ok := present[k]; ok {
						continue
					}
					slot := sh.newNode(k, 0, 0, 0)
					sh.nodes[slot].h0 = 1
					present[k] = slot
					keys = append(keys, k)
				}
				if i%97 == 0 || i > 3900 {
					for k, slot := range present {
						if got, ok := sh.find(k); !ok || got != slot {
							t.Fatalf("step %d: find(%#x) = %d %v, want %d", i, k, got, ok, slot)
						}
					}
					if _, ok := sh.find(c.key(r) ^ 1<<40); ok && len(present) == 0 {
						t.Fatalf("found a key in an empty table")
					}
					if sh.live != len(present) {
						t.Fatalf("live %d, want %d", sh.live, len(present))
					}
				}
			}
		})
	}
}

// TestHolderSets grows and shrinks one node's holder set through the
// arena's size classes and compares it with a sorted slice.
func TestHolderSets(t *testing.T) {
	for _, max := range []int{2, 9, 300} {
		t.Run(fmt.Sprint(max), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(max), 1))
			var sh shard
			slot := sh.newNode(42, 0, 0, 0)
			other := sh.newNode(43, 0, 0, 0) // shares the arena
			var want, wantOther []uint32
			for step := range 5000 {
				target, list := slot, &want
				if r.IntN(3) == 0 {
					target, list = other, &wantOther
				}
				n := &sh.nodes[target]
				id := uint32(r.IntN(max))
				i, found := sh.findHolder(n, id)
				j, wfound := slices.BinarySearch(*list, id<<idShift|1)
				if found != wfound || (found && i != j) {
					t.Fatalf("step %d: findHolder(%d) = %d %v, want %d %v", step, id, i, found, j, wfound)
				}
				if found {
					sh.deleteHolder(n, i)
					*list = slices.Delete(*list, j, j+1)
				} else {
					sh.insertHolder(n, i, id<<idShift|1)
					*list = slices.Insert(*list, j, id<<idShift|1)
				}
				for _, c := range []struct {
					slot uint32
					want []uint32
				}{{slot, want}, {other, wantOther}} {
					n := &sh.nodes[c.slot]
					got := make([]uint32, sh.holderCount(n))
					for k := range got {
						got[k] = sh.holder(n, k)
					}
					if !slices.Equal(got, c.want) {
						t.Fatalf("step %d: holders %v, want %v", step, got, c.want)
					}
				}
			}
		})
	}
}

func TestSelectKth(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	for _, n := range []int{1, 2, 3, 10, 1000} {
		for _, spread := range []int{1, 3, 1 << 30} {
			keys := make([]uint64, n)
			for i := range keys {
				keys[i] = uint64(r.IntN(spread))
			}
			sorted := slices.Clone(keys)
			slices.Sort(sorted)
			for _, k := range []int{0, n / 2, n - 1} {
				if got := selectKth(slices.Clone(keys), k); got != sorted[k] {
					t.Fatalf("n %d spread %d: selectKth(%d) = %d, want %d", n, spread, k, got, sorted[k])
				}
			}
		}
	}
}
