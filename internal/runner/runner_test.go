package runner

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"kvrouter/internal/kvevents"
)

const testBlock = 64

// block returns key's test block: its bytes derive from the key, so a block
// delivered under the wrong key or torn shows up.
func block(key uint64) []byte {
	b := make([]byte, testBlock)
	for i := 0; i < testBlock; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], key*0x9e3779b97f4a7c15+uint64(i))
	}
	return b
}

// recorder is a Sink that keeps every event.
type recorder struct {
	mu  sync.Mutex
	evs []Inventory
}

func (r *recorder) Inventory(ev Inventory) {
	r.mu.Lock()
	r.evs = append(r.evs, ev)
	r.mu.Unlock()
}

func (r *recorder) events() []Inventory {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.evs)
}

func newTestRunner(t testing.TB, cfg Config) *Runner {
	t.Helper()
	if cfg.BlockBytes == 0 {
		cfg.BlockBytes = testBlock
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func states(sts []Status) []State {
	out := make([]State, len(sts))
	for i, s := range sts {
		out[i] = s.State
	}
	return out
}

func TestDepositReadQuery(t *testing.T) {
	rec := &recorder{}
	r := newTestRunner(t, Config{Capacity: 2, Sink: rec})
	if _, err := r.Deposit(1, block(1), DepositOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Deposit(1, block(1), DepositOptions{}); err != nil {
		t.Fatalf("re-deposit: %v", err)
	}
	if _, err := r.Deposit(2, make([]byte, testBlock-1), DepositOptions{}); !errors.Is(err, ErrBlockSize) {
		t.Fatalf("short deposit: %v, want ErrBlockSize", err)
	}
	c, err := r.Read(1)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(c.Bytes(), block(1)) {
		t.Fatal("read bytes differ")
	}
	c.Release()
	c.Release() // a second release must not unpin anyone else's claim
	if _, err := r.Read(2); !errors.Is(err, ErrNotFound) {
		t.Fatalf("read of absent key: %v", err)
	}
	if err := r.SubmitHint("req", Hint{Source: "tcp://10.0.0.7:25000", Keys: []uint64{2, 3, 3}}); err != nil {
		t.Fatal(err)
	}
	got := r.Query([]uint64{1, 2, 3, 4}, "req")
	if want := []State{Hit, Fetchable, Fetchable, Miss}; !slices.Equal(states(got), want) {
		t.Fatalf("query = %v, want %v", states(got), want)
	}
	if got[0].Tier != kvevents.TierHost {
		t.Fatalf("tier %v", got[0].Tier)
	}
	if got := r.Query([]uint64{2}, "other"); got[0].State != Miss {
		t.Fatalf("another request sees the hint: %v", got[0].State)
	}
	r.DiscardHint("req")
	if got := r.Query([]uint64{2}, "req"); got[0].State != Miss {
		t.Fatalf("discarded hint still used: %v", got[0].State)
	}
	if st := r.Stats(); st.Pinned != 0 || st.Used != 1 || st.Hints != 0 {
		t.Fatalf("stats %+v", st)
	}
	if evs := rec.events(); len(evs) != 1 || !slices.Equal(evs[0].Keys, []uint64{1}) || evs[0].Removed {
		t.Fatalf("events %+v, want one store of key 1", evs)
	}
}

func TestHintRules(t *testing.T) {
	tests := []struct {
		name    string
		hints   []Hint
		wantErr []error
		query   []State // for keys 1, 2
	}{
		{"empty source", []Hint{{Keys: []uint64{1}}}, []error{ErrHint}, []State{Miss, Miss}},
		{"no keys", []Hint{{Source: "tcp://a:1"}}, []error{ErrHint}, []State{Miss, Miss}},
		{"same source merges", []Hint{{Source: "tcp://a:1", Keys: []uint64{1}}, {Source: "tcp://a:1", Keys: []uint64{2}}}, []error{nil, nil}, []State{Fetchable, Fetchable}},
		{"other source fails closed", []Hint{{Source: "tcp://a:1", Keys: []uint64{1}}, {Source: "tcp://b:1", Keys: []uint64{2}}, {Source: "tcp://a:1", Keys: []uint64{2}}},
			[]error{nil, ErrHintConflict, ErrHintConflict}, []State{Miss, Miss}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newTestRunner(t, Config{Capacity: 1})
			for i, h := range tt.hints {
				if err := r.SubmitHint("req", h); !errors.Is(err, tt.wantErr[i]) || (err == nil) != (tt.wantErr[i] == nil) {
					t.Fatalf("hint %d: %v, want %v", i, err, tt.wantErr[i])
				}
			}
			if got := states(r.Query([]uint64{1, 2}, "req")); !slices.Equal(got, tt.query) {
				t.Fatalf("query = %v, want %v", got, tt.query)
			}
		})
	}
	// A conflict drops one request's hint only, and DiscardHint forgets
	// it: the request's next hint, from any source, counts again.
	r := newTestRunner(t, Config{Capacity: 1})
	steps := []struct {
		req, source string
		want        error
	}{{"a", "tcp://a:1", nil}, {"b", "tcp://a:1", nil}, {"b", "tcp://b:1", ErrHintConflict}}
	for _, s := range steps {
		if err := r.SubmitHint(s.req, Hint{Source: s.source, Keys: []uint64{1}}); !errors.Is(err, s.want) || (err == nil) != (s.want == nil) {
			t.Fatalf("hint for %s from %s: %v, want %v", s.req, s.source, err, s.want)
		}
	}
	if a, b := states(r.Query([]uint64{1}, "a")), states(r.Query([]uint64{1}, "b")); a[0] != Fetchable || b[0] != Miss {
		t.Fatalf("after b's conflict: a reads %v, b reads %v; want Fetchable, Miss", a[0], b[0])
	}
	r.DiscardHint("b")
	if err := r.SubmitHint("b", Hint{Source: "tcp://b:1", Keys: []uint64{1}}); err != nil {
		t.Fatalf("hint after DiscardHint: %v", err)
	}
	if b := states(r.Query([]uint64{1}, "b")); b[0] != Fetchable {
		t.Fatalf("after DiscardHint and a new hint, b reads %v", b[0])
	}
	r = newTestRunner(t, Config{Capacity: 1, MaxHints: 1})
	if err := r.SubmitHint("a", Hint{Source: "tcp://a:1", Keys: []uint64{1}}); err != nil {
		t.Fatal(err)
	}
	if err := r.SubmitHint("b", Hint{Source: "tcp://a:1", Keys: []uint64{1}}); !errors.Is(err, ErrTooManyHints) {
		t.Fatalf("hint over max: %v", err)
	}
}

func TestNoEvictAndCapacitySignal(t *testing.T) {
	var signals []PoolStats
	r := newTestRunner(t, Config{Capacity: 3, LowWatermark: 2, OnCapacityNeeded: func(st PoolStats) { signals = append(signals, st) }})
	h1, err := r.Deposit(1, block(1), DepositOptions{NoEvict: true})
	if err != nil || h1 == nil {
		t.Fatalf("no_evict deposit: %v %v", h1, err)
	}
	h2, err := r.Deposit(2, block(2), DepositOptions{NoEvict: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(signals) != 1 || !signals[0].Low {
		t.Fatalf("signals %+v, want one low signal", signals)
	}
	for k := uint64(3); k < 10; k++ {
		if _, err := r.Deposit(k, block(k), DepositOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []uint64{1, 2} {
		c, err := r.Read(k)
		if err != nil {
			t.Fatalf("no_evict block %d evicted: %v", k, err)
		}
		if !bytes.Equal(c.Bytes(), block(k)) {
			t.Fatalf("no_evict block %d changed", k)
		}
		c.Release()
	}
	h1.Release()
	h2.Release()
	if _, err := r.Deposit(10, block(10), DepositOptions{}); err != nil {
		t.Fatal(err)
	}
	if st := r.Stats(); st.Pinned != 0 || st.Low {
		t.Fatalf("stats %+v", st)
	}
	// Re-deposit with NoEvict pins the held block.
	h, err := r.Deposit(10, block(10), DepositOptions{NoEvict: true})
	if err != nil || h == nil {
		t.Fatalf("no_evict re-deposit: %v %v", h, err)
	}
	if st := r.Stats(); st.Pinned != 1 {
		t.Fatalf("pinned %d", st.Pinned)
	}
	h.Release()
	if len(signals) != 1 {
		t.Fatalf("signals %d, want 1 (only crossings signal)", len(signals))
	}
}

// TestInventoryOrder deposits and evicts from many goroutines and replays
// the sink's events: delivered in commit order, they must never store a
// held key or remove an absent one, and must end at the pool's contents.
func TestInventoryOrder(t *testing.T) {
	for _, pol := range policies {
		t.Run(pol.name, func(t *testing.T) {
			rec := &recorder{}
			r := newTestRunner(t, Config{Capacity: 8, Policy: pol.mk, Sink: rec})
			var wg sync.WaitGroup
			for g := 0; g < 4; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 300; i++ {
						k := uint64((g*7 + i*3) % 32)
						switch i % 5 {
						case 4:
							r.Evict(k, k+1)
						default:
							if _, err := r.Deposit(k, block(k), DepositOptions{}); err != nil && !errors.Is(err, ErrBusy) {
								t.Error(err)
								return
							}
						}
						if g == 0 && i%100 == 99 {
							r.EvictAll()
						}
					}
				}()
			}
			wg.Wait()
			held := map[uint64]bool{}
			for i, ev := range rec.events() {
				for _, k := range ev.Keys {
					if held[k] == !ev.Removed {
						t.Fatalf("event %d %+v: key %d already in that state", i, ev, k)
					}
					held[k] = !ev.Removed
				}
			}
			for k := uint64(0); k < 33; k++ {
				hit := r.Query([]uint64{k}, "")[0].State == Hit
				if hit != held[k] {
					t.Fatalf("key %d: pool holds %v, events say %v", k, hit, held[k])
				}
			}
		})
	}
}

func TestEvictClaimed(t *testing.T) {
	rec := &recorder{}
	r := newTestRunner(t, Config{Capacity: 2, Sink: rec})
	for k := uint64(1); k <= 2; k++ {
		r.Deposit(k, block(k), DepositOptions{})
	}
	c, err := r.Read(1)
	if err != nil {
		t.Fatal(err)
	}
	if n := r.Evict(1, 3); n != 1 {
		t.Fatalf("evicted %d, want 1", n)
	}
	if _, err := r.Read(1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("evicted block still readable: %v", err)
	}
	// The claimed slot is not reused while claimed: the pool has one slot left.
	r.Deposit(3, block(3), DepositOptions{})
	if !bytes.Equal(c.Bytes(), block(1)) {
		t.Fatal("claimed block overwritten after eviction")
	}
	c.Release()
	if n := r.EvictAll(); n != 1 {
		t.Fatalf("evict all removed %d", n)
	}
	want := []string{"+[1]", "+[2]", "-[1]", "-[2]", "+[3]", "-[3]"}
	var got []string
	for _, ev := range rec.events() {
		sign := "+"
		if ev.Removed {
			sign = "-"
		}
		got = append(got, fmt.Sprint(sign, ev.Keys))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	if st := r.Stats(); st.Free != 2 || st.Pinned != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []Config{
		{BlockBytes: 0, Capacity: 1},
		{BlockBytes: 1, Capacity: 0},
		{BlockBytes: 1, Capacity: 1, OperationTimeout: 2e9, AbandonTimeout: 1e9},
	}
	for _, cfg := range tests {
		if _, err := New(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", cfg, err)
		}
	}
}

// TestSinkMayRead: a sink may Read and Release (Sink's contract) while
// other goroutines queue inventory; it once waited for the delivery lock its
// own goroutine held.
func TestSinkMayRead(t *testing.T) {
	var r *Runner
	sink := SinkFunc(func(ev Inventory) {
		if ev.Removed {
			return
		}
		time.Sleep(time.Millisecond) // lets the other depositor queue meanwhile
		if c, err := r.Read(ev.Keys[0]); err == nil {
			c.Release()
		}
	})
	r = newTestRunner(t, Config{Capacity: 64, Sink: sink})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for g := 0; g < 2; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 50; i++ {
					k := uint64(g*1000 + i)
					r.Deposit(k, block(k), DepositOptions{})
				}
			}()
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("deadlock: a sink calling Read (allowed by the Sink contract) hung the runner")
	}
}

// TestServerPinsSignalLow: pins a peer server takes count towards the low
// watermark like any other.
func TestServerPinsSignalLow(t *testing.T) {
	var signals int
	r := newTestRunner(t, Config{Capacity: 2, LowWatermark: 1, OnCapacityNeeded: func(PoolStats) { signals++ }})
	r.Deposit(1, block(1), DepositOptions{})
	r.Deposit(2, block(2), DepositOptions{})
	s1, _, _, _ := r.acquire(1)
	s2, _, _, _ := r.acquire(2)
	low := r.Stats().Low
	r.releaseSlot(s1, 0, false)
	r.releaseSlot(s2, 0, false)
	if !low || signals != 1 {
		t.Fatalf("two of two slots pinned by the server, watermark 1: Low %v, OnCapacityNeeded called %d times; want true, once", low, signals)
	}
}
