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
		{"uniform", func(r *rand.Rand) uint64 { return r.Uint64() | 1 }},
		{"one home", func(r *rand.Rand) uint64 { return r.Uint64()&(0xFFFF<<32) | 5 }},
		{"wrapping homes", func(r *rand.Rand) uint64 { return r.Uint64()&(0xFFFF<<32) | uint64(0xFFFFFFF0|r.IntN(16)) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, 7))
			var sh shard
			sh.nodes = new(store)
			present := make(map[uint64]bool)
			var keys []uint64
			for i := range 4000 {
				if len(keys) > 0 && r.IntN(5) < 2 {
					j := r.IntN(len(keys))
					k := keys[j]
					keys[j] = keys[len(keys)-1]
					keys = keys[:len(keys)-1]
					pos, ok := sh.find(k)
					if !ok || sh.at(pos).seq != k {
						t.Fatalf("step %d: find(%#x) = %d %v", i, k, pos, ok)
					}
					sh.freeNode(pos)
					delete(present, k)
				} else {
					k := c.key(r)
					if present[k] {
						continue
					}
					pos := sh.newNode(k, 0, 0, 0, noRef)
					if sh.at(pos).seq != k {
						t.Fatalf("newNode put %#x elsewhere", k)
					}
					present[k] = true
					keys = append(keys, k)
				}
				if i%97 == 0 || i > 3900 {
					for k := range present {
						if pos, ok := sh.find(k); !ok || sh.at(pos).seq != k {
							t.Fatalf("step %d: find(%#x) = %d %v", i, k, pos, ok)
						}
					}
					used := 0
					for _, n := range sh.dir {
						if n.seq != 0 {
							used++
							if !present[n.seq] {
								t.Fatalf("step %d: table keeps deleted %#x", i, n.seq)
							}
						}
					}
					if sh.live != len(present) || used != len(present) {
						t.Fatalf("live %d, used %d, want %d", sh.live, used, len(present))
					}
				}
			}
		})
	}
}

// TestHolderSets grows and shrinks two nodes' holder sets through every
// representation (inline, sparse blocks of each size class, dense) and
// compares them with sorted slices. Sources numbered 1<<16 and up (scale)
// cannot be kept inline.
func TestHolderSets(t *testing.T) {
	for _, c := range []struct{ ids, scale int }{{2, 1}, {3, 1}, {4, 1}, {9, 1}, {300, 1}, {2000, 1}, {6, 30000}, {40, 5000}} {
		ids := c.ids
		t.Run(fmt.Sprint(ids, "x", c.scale), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(ids), 1))
			var sh shard
			sh.nodes = new(store)
			sh.newNode(42, 0, 0, 0, noRef)
			sh.newNode(43, 0, 0, 0, noRef) // shares the arena
			want := map[uint64][]uint32{}
			dense := false
			steps := 8000
			for step := range steps {
				seq := uint64(42 + r.IntN(2))
				pos, _ := sh.find(seq)
				n := sh.at(pos)
				list := want[seq]
				id := uint32(r.IntN(ids) * c.scale)
				// Grow for the first half, then shrink.
				add := r.IntN(4) > 0 == (step < steps/2)
				j, has := search(list, id)
				w, ok := sh.getHolder(n, id)
				if ok != has || (has && w != list[j]) {
					t.Fatalf("step %d: getHolder(%d) = %#x %v, want %v", step, id, w, ok, has)
				}
				switch {
				case add:
					w := id<<idShift | uint32(1+r.IntN(tierMask))
					sh.putHolder(n, w)
					if has {
						list[j] = w
					} else {
						want[seq] = slices.Insert(list, j, w)
					}
				case has:
					sh.delHolder(n, id)
					want[seq] = slices.Delete(list, j, j+1)
				}
				for _, s := range []uint64{42, 43} {
					pos, _ := sh.find(s)
					n := sh.at(pos)
					got := sh.appendHolders(nil, n)
					if !slices.Equal(got, want[s]) || sh.holderCount(n) != len(got) {
						t.Fatalf("step %d: holders of %d %v (count %d), want %v", step, s, got, sh.holderCount(n), want[s])
					}
					if (n.meta&metaMore != 0) != !fitsInline(got) {
						t.Fatalf("step %d: %d holders, arena flag %v", step, len(got), n.meta&metaMore != 0)
					}
					dense = dense || sh.isDense(n)
				}
			}
			if ids >= 300 && !dense {
				t.Fatalf("never turned dense")
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

// TestEngineTable checks the per-source engine-hash table against a map,
// with hashes that collide on purpose.
func TestEngineTable(t *testing.T) {
	cases := []struct {
		name string
		key  func(r *rand.Rand) uint64
	}{
		{"uniform", func(r *rand.Rand) uint64 { return r.Uint64() }},
		{"small", func(r *rand.Rand) uint64 { return uint64(r.IntN(300)) }},
		{"multiples", func(r *rand.Rand) uint64 { return uint64(r.IntN(300)) << 40 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(5, 5))
			var tab engineTable
			want := make(map[uint64]uint64)
			for step := range 6000 {
				e := c.key(r)
				switch r.IntN(3) {
				case 0, 1:
					seq := r.Uint64() | 1
					tab.put(e, seq)
					want[e] = seq
				default:
					tab.del(e)
					delete(want, e)
				}
				if step%101 == 0 || step > 5900 {
					if tab.len() != len(want) {
						t.Fatalf("step %d: len %d, want %d", step, tab.len(), len(want))
					}
					for e, seq := range want {
						if got, ok := tab.get(e); !ok || got != seq {
							t.Fatalf("step %d: get(%#x) = %#x %v, want %#x", step, e, got, ok, seq)
						}
					}
					if got := tab.entries(nil); len(got) != len(want) {
						t.Fatalf("step %d: %d entries, want %d", step, len(got), len(want))
					}
				}
			}
			if _, ok := tab.get(1 << 63); ok && want[1<<63] == 0 {
				t.Fatalf("found an absent key")
			}
			tab.reset()
			if tab.len() != 0 || tab.bytes() != 0 {
				t.Fatalf("reset kept %d entries", tab.len())
			}
		})
	}
}
