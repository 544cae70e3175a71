package runner

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

var policies = []struct {
	name string
	mk   func(int) Policy
}{
	{"lru", NewLRU},
	{"fifo", NewFIFO},
}

func newTestPool(t testing.TB, mk func(int) Policy, slots, watermark int) *Pool {
	t.Helper()
	p, err := NewPool(PoolConfig{BlockBytes: 16, Slots: slots, Policy: mk, LowWatermark: watermark})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// store reserves and commits key with its key written into the block, so
// later reads can check the slot was not reused under them.
func store(t testing.TB, p *Pool, key uint64, pin bool) Reservation {
	t.Helper()
	res, err := p.Reserve(key)
	if err != nil {
		t.Fatalf("reserve %d: %v", key, err)
	}
	binary.LittleEndian.PutUint64(p.Buffer(res.Slot), key)
	p.Commit(res.Slot, 0, false, pin)
	return res
}

func checkAccounting(t *testing.T, p *Pool) {
	t.Helper()
	st := p.Stats()
	// Doomed slots (removed while pinned) are neither used nor free.
	if st.Used+st.Free+st.Pending+p.doomed != st.Slots || st.Pinned != st.Pending+p.pinnedCommitted+p.doomed {
		t.Fatalf("slots do not add up: %+v", st)
	}
}

// TestPoolBehaviour runs the same contract against every policy.
func TestPoolBehaviour(t *testing.T) {
	for _, pol := range policies {
		t.Run(pol.name, func(t *testing.T) {
			t.Run("store and look up", func(t *testing.T) {
				p := newTestPool(t, pol.mk, 2, 0)
				if got := p.Lookup(1); got != Absent {
					t.Fatalf("empty pool: lookup = %v", got)
				}
				res, err := p.Reserve(1)
				if err != nil {
					t.Fatal(err)
				}
				if got := p.Lookup(1); got != Pending {
					t.Fatalf("reserved: lookup = %v, want Pending", got)
				}
				if _, err := p.Reserve(1); !errors.Is(err, ErrBusy) {
					t.Fatalf("second reserve: %v, want ErrBusy", err)
				}
				if _, ok := p.Pin(1); ok {
					t.Fatal("pinned a pending block")
				}
				p.Commit(res.Slot, 7, true, false)
				if got := p.Lookup(1); got != Present {
					t.Fatalf("committed: lookup = %v", got)
				}
				if _, err := p.Reserve(1); !errors.Is(err, ErrExists) {
					t.Fatalf("reserve of held key: %v, want ErrExists", err)
				}
				if sum, ok := p.Sum(res.Slot); !ok || sum != 7 {
					t.Fatalf("sum = %d,%v", sum, ok)
				}
				st := p.Stats()
				if st.Hits != 1 || st.Misses != 2 || st.Used != 1 || st.Free != 1 {
					t.Fatalf("stats %+v", st)
				}
				checkAccounting(t, p)
			})
			t.Run("abort frees the slot", func(t *testing.T) {
				p := newTestPool(t, pol.mk, 1, 0)
				res, _ := p.Reserve(1)
				p.Abort(res.Slot)
				if p.Peek(1) != Absent || p.Stats().Free != 1 {
					t.Fatalf("after abort: %v %+v", p.Peek(1), p.Stats())
				}
				store(t, p, 2, false)
				checkAccounting(t, p)
			})
			t.Run("pinned and pending slots are never evicted", func(t *testing.T) {
				p := newTestPool(t, pol.mk, 3, 0)
				store(t, p, 1, true) // no_evict
				store(t, p, 2, false)
				if _, err := p.Reserve(3); err != nil { // pending
					t.Fatal(err)
				}
				res := store(t, p, 4, false)
				if !res.HasEvicted || res.Evicted != 2 {
					t.Fatalf("evicted %+v, want key 2", res)
				}
				if _, err := p.Reserve(5); err != nil {
					t.Fatal(err)
				}
				if _, err := p.Reserve(6); !errors.Is(err, ErrFull) {
					t.Fatalf("reserve with all slots pinned: %v, want ErrFull", err)
				}
				if st := p.Stats(); st.Pinned != 3 || st.Pending != 2 || st.Evictions != 2 {
					t.Fatalf("stats %+v", st)
				}
				checkAccounting(t, p)
			})
			t.Run("remove while pinned defers reuse", func(t *testing.T) {
				p := newTestPool(t, pol.mk, 2, 0)
				store(t, p, 1, false)
				slot, ok := p.Pin(1)
				if !ok {
					t.Fatal("pin failed")
				}
				if !p.Remove(1) {
					t.Fatal("remove failed")
				}
				if p.Peek(1) != Absent {
					t.Fatal("removed key still visible")
				}
				store(t, p, 2, false)
				if _, err := p.Reserve(3); err != nil { // evicts 2, not the doomed slot
					t.Fatal(err)
				}
				if got := binary.LittleEndian.Uint64(p.Buffer(slot)); got != 1 {
					t.Fatalf("doomed slot overwritten: holds %d", got)
				}
				if _, err := p.Reserve(4); !errors.Is(err, ErrFull) {
					t.Fatalf("reserve: %v, want ErrFull", err)
				}
				p.Unpin(slot)
				if st := p.Stats(); st.Free != 1 || st.Pinned != 1 {
					t.Fatalf("after unpin: %+v", st)
				}
				if p.Remove(3) {
					t.Fatal("removed a pending key")
				}
			})
			t.Run("remove all", func(t *testing.T) {
				p := newTestPool(t, pol.mk, 4, 0)
				for k := uint64(1); k <= 3; k++ {
					store(t, p, k, false)
				}
				got := p.RemoveAll(nil)
				slices.Sort(got)
				if !slices.Equal(got, []uint64{1, 2, 3}) {
					t.Fatalf("removed %v", got)
				}
				if st := p.Stats(); st.Free != 4 || st.Used != 0 || st.Removals != 3 {
					t.Fatalf("stats %+v", st)
				}
			})
			t.Run("low watermark", func(t *testing.T) {
				p := newTestPool(t, pol.mk, 4, 3)
				var lows []bool
				store(t, p, 1, true)
				lows = append(lows, p.Low())
				store(t, p, 2, false) // evictable: does not count against room
				lows = append(lows, p.Low())
				c := store(t, p, 3, true)
				lows = append(lows, p.Low())
				p.Unpin(c.Slot)
				lows = append(lows, p.Low())
				if want := []bool{false, false, true, false}; !slices.Equal(lows, want) {
					t.Fatalf("low = %v, want %v", lows, want)
				}
			})
		})
	}
}

// TestPolicyOrder checks each policy's eviction order after the same uses.
func TestPolicyOrder(t *testing.T) {
	tests := []struct {
		name    string
		touch   []uint64 // keys read after storing 1, 2, 3 in order
		wantLRU []uint64 // order of eviction as 4, 5, 6 are stored
		wantFIF []uint64
	}{
		{"no reads", nil, []uint64{1, 2, 3}, []uint64{1, 2, 3}},
		{"oldest read", []uint64{1}, []uint64{2, 3, 1}, []uint64{1, 2, 3}},
		{"reads reverse", []uint64{3, 2, 1}, []uint64{3, 2, 1}, []uint64{1, 2, 3}},
	}
	for _, tt := range tests {
		for _, pol := range policies {
			t.Run(tt.name+"/"+pol.name, func(t *testing.T) {
				p := newTestPool(t, pol.mk, 3, 0)
				for k := uint64(1); k <= 3; k++ {
					store(t, p, k, false)
				}
				for _, k := range tt.touch {
					s, _ := p.Pin(k)
					p.Unpin(s)
				}
				var got []uint64
				for k := uint64(4); k <= 6; k++ {
					got = append(got, store(t, p, k, false).Evicted)
				}
				want := tt.wantLRU
				if pol.name == "fifo" {
					want = tt.wantFIF
				}
				if !slices.Equal(got, want) {
					t.Fatalf("evicted %v, want %v", got, want)
				}
			})
		}
	}
}

// TestPoolRandom drives random operations and checks the invariants after
// each: no slot is shared, a pinned block's bytes never change, and the
// counts add up.
func TestPoolRandom(t *testing.T) {
	for _, pol := range policies {
		t.Run(pol.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			p := newTestPool(t, pol.mk, 8, 3)
			type pin struct {
				slot int
				key  uint64
			}
			var pins []pin
			pending := map[uint64]int{}
			for i := 0; i < 20000; i++ {
				key := uint64(rng.IntN(24))
				switch op := rng.IntN(7); op {
				case 0, 1:
					res, err := p.Reserve(key)
					if err == nil {
						binary.LittleEndian.PutUint64(p.Buffer(res.Slot), key)
						pending[key] = res.Slot
					} else if !errors.Is(err, ErrExists) && !errors.Is(err, ErrBusy) && !errors.Is(err, ErrFull) {
						t.Fatal(err)
					}
				case 2:
					for k, s := range pending {
						if rng.IntN(3) == 0 {
							p.Abort(s)
						} else {
							p.Commit(s, 0, false, rng.IntN(4) == 0)
							if p.slots[s].pins > 0 {
								pins = append(pins, pin{s, k})
							}
						}
						delete(pending, k)
						break
					}
				case 3:
					if s, ok := p.Pin(key); ok {
						pins = append(pins, pin{s, key})
					}
				case 4:
					if len(pins) > 0 {
						j := rng.IntN(len(pins))
						p.Unpin(pins[j].slot)
						pins = slices.Delete(pins, j, j+1)
					}
				case 5:
					p.Remove(key)
				case 6:
					p.Lookup(key)
				}
				for _, pn := range pins {
					if got := binary.LittleEndian.Uint64(p.Buffer(pn.slot)); got != pn.key {
						t.Fatalf("op %d: pinned slot %d of key %d now holds %d", i, pn.slot, pn.key, got)
					}
				}
				seen := map[int]uint64{}
				for k, s := range p.index {
					if other, dup := seen[s]; dup {
						t.Fatalf("slot %d holds keys %d and %d", s, k, other)
					}
					seen[s] = k
				}
				checkAccounting(t, p)
			}
		})
	}
}

func TestPoolConfigErrors(t *testing.T) {
	tests := []PoolConfig{
		{BlockBytes: 0, Slots: 1},
		{BlockBytes: 1, Slots: 0},
		{BlockBytes: 1, Slots: 2, LowWatermark: 3},
		{BlockBytes: maxInt, Slots: 2},
	}
	for _, cfg := range tests {
		if _, err := NewPool(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("NewPool(%+v) = %v, want ErrConfig", cfg, err)
		}
	}
}
