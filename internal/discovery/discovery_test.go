package discovery

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"kvrouter/internal/bus"
)

// harness is one Registry implementation under the shared suite. expire
// makes every lease older than the TTL lapse.
type harness struct {
	reg    Registry
	expire func()
}

func memoryHarness(t *testing.T) harness {
	var mu sync.Mutex
	now := time.Unix(1700000000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	m := NewMemory(10*time.Second, clock)
	return harness{reg: m, expire: func() {
		mu.Lock()
		now = now.Add(11 * time.Second)
		mu.Unlock()
		m.Sweep()
	}}
}

func natsHarness(t *testing.T) harness {
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Options{Name: "discovery-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	n, err := OpenNATS(ctx, b.JS, "", time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A real lease runs out on the server's clock; the watcher's OpDelete
	// is what the test waits for.
	return harness{reg: n, expire: func() {}}
}

func worker(id string) Worker {
	w := Worker{ID: id, Model: "m", URL: "http://" + id, Engine: "sglang", BlockSize: 64, DPSize: 1}
	w.RuntimeData, _ = w.RuntimeData.Set("router_hint_source_control_endpoints", map[string]string{"0": "tcp://10.0.0.1:25000"})
	w.RuntimeData, _ = w.RuntimeData.Set("router_hint_worker_type", "aggregated")
	w.RuntimeData, _ = w.RuntimeData.Set("router_hint", true)
	return w
}

func next(t *testing.T, ch <-chan Change) Change {
	t.Helper()
	select {
	case c, ok := <-ch:
		if !ok {
			t.Fatal("watch closed")
		}
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no change within 10s")
	}
	return Change{}
}

func TestRegistries(t *testing.T) {
	for name, mk := range map[string]func(*testing.T) harness{"memory": memoryHarness, "nats": natsHarness} {
		t.Run(name, func(t *testing.T) {
			t.Run("watch sees existing then live", func(t *testing.T) { testWatch(t, mk(t)) })
			t.Run("announce stages capability last", func(t *testing.T) { testAnnounce(t, mk(t)) })
			t.Run("lease expires", func(t *testing.T) { testExpiry(t, mk(t)) })
			t.Run("rejects invalid", func(t *testing.T) { testInvalid(t, mk(t)) })
		})
	}
}

func testWatch(t *testing.T, h harness) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := h.reg.Put(ctx, worker("a:1")); err != nil {
		t.Fatal(err)
	}
	ch, err := h.reg.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := next(t, ch); c.Op != OpPut || c.ID != "a:1" || c.Worker.BlockSize != 64 {
		t.Fatalf("first change = %+v, want put a:1", c)
	}
	if c := next(t, ch); c.Op != OpSynced {
		t.Fatalf("want synced, got %+v", c)
	}
	if err := h.reg.Put(ctx, worker("b:2")); err != nil {
		t.Fatal(err)
	}
	if c := next(t, ch); c.Op != OpPut || c.ID != "b:2" {
		t.Fatalf("got %+v, want put b:2", c)
	}
	if err := h.reg.Delete(ctx, "a:1"); err != nil {
		t.Fatal(err)
	}
	if c := next(t, ch); c.Op != OpDelete || c.ID != "a:1" {
		t.Fatalf("got %+v, want delete a:1", c)
	}
	if err := h.reg.Delete(ctx, "nope"); err != ErrNotFound {
		t.Fatalf("delete unknown: %v, want ErrNotFound", err)
	}
	cancel()
	for range ch { // must close after cancel
	}
}

func testAnnounce(t *testing.T, h harness) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, _ := h.reg.Watch(ctx)
	next(t, ch) // synced
	w := worker("x:9")
	if err := Announce(ctx, h.reg, w); err != nil {
		t.Fatal(err)
	}
	// A watcher may see any subset of the stages (NATS coalesces a key's
	// updates for a slow consumer), but every state it sees must be a
	// prefix of the publish order, ending with the whole.
	order := []string{"router_hint_source_control_endpoints", "router_hint_worker_type", "router_hint"}
	for {
		c := next(t, ch)
		if c.Op != OpPut {
			t.Fatalf("unexpected %+v", c)
		}
		rd := c.Worker.RuntimeData
		if len(rd) == 0 || len(rd) > len(order) {
			t.Fatalf("observed runtime data %v", rd)
		}
		for i, f := range rd {
			if f.Key != order[i] {
				t.Fatalf("observed keys out of publish order: %v", rd)
			}
		}
		if len(rd) == len(order) {
			return
		}
	}
}

func testExpiry(t *testing.T, h harness) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, _ := h.reg.Watch(ctx)
	next(t, ch)
	if err := h.reg.Put(ctx, worker("gone:1")); err != nil {
		t.Fatal(err)
	}
	next(t, ch)
	h.expire()
	if c := next(t, ch); c.Op != OpDelete || c.ID != "gone:1" {
		t.Fatalf("got %+v, want expiry of gone:1", c)
	}
}

func testInvalid(t *testing.T, h harness) {
	w := worker("bad:1")
	w.BlockSize = 0
	if err := h.reg.Put(context.Background(), w); err == nil {
		t.Fatal("put of a worker without block size succeeded")
	}
}

func TestKeyRoundTrip(t *testing.T) {
	for _, id := range []string{"10.0.0.7:8000", "worker-a_1", "[fd00::1]:80", "a=b", ""} {
		got, err := idFor(keyFor(id))
		if err != nil || got != id {
			t.Errorf("idFor(keyFor(%q)) = %q, %v", id, got, err)
		}
	}
}

func TestRuntimeDataOrder(t *testing.T) {
	in := `{"z":1,"a":{"0":"tcp://h:1"},"m":true}`
	var r RuntimeData
	if err := json.Unmarshal([]byte(in), &r); err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(r)
	if string(out) != in {
		t.Fatalf("round trip %s, want %s", out, in)
	}
	m, err := r.Map()
	if err != nil || m["m"] != true {
		t.Fatalf("map = %v, %v", m, err)
	}
}

func TestNATSRecreatesLostBucket(t *testing.T) {
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Options{Name: "discovery-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	n, err := OpenNATS(ctx, b.JS, "", time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	// What a server restart does to a memory-storage bucket.
	if err := b.JS.DeleteKeyValue(ctx, DefaultBucket); err != nil {
		t.Fatal(err)
	}
	if err := n.Put(ctx, worker("again:1")); err != nil {
		t.Fatalf("put after the bucket was lost: %v", err)
	}
	ch, err := n.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := next(t, ch); c.Op != OpPut || c.ID != "again:1" {
		t.Fatalf("got %+v, want the re-registered worker", c)
	}
}

// TestBucketKeepsItsLease: a process given another --lease takes the
// existing bucket as it is, and its lease with it: it neither fails (NATS
// refuses some updates of a bucket in use) nor sets the fleet's lease for
// the agents already refreshing at theirs. A bucket the server lost comes
// back with that lease.
func TestBucketKeepsItsLease(t *testing.T) {
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Options{Name: "lease-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	first, err := OpenNATS(ctx, b.JS, "", 3*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	second, err := OpenNATS(ctx, b.JS, "", 6*time.Second, nil)
	if err != nil {
		t.Fatalf("a second lease: %v", err)
	}
	if first.Lease() != 3*time.Second || second.Lease() != 3*time.Second {
		t.Fatalf("leases %v and %v, want the bucket's 3s", first.Lease(), second.Lease())
	}
	kv, err := b.JS.KeyValue(ctx, DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := kv.Status(ctx); err != nil || st.TTL() != 3*time.Second {
		t.Fatalf("bucket TTL %v (%v), want 3s", st.TTL(), err)
	}
	if err := b.JS.DeleteKeyValue(ctx, DefaultBucket); err != nil {
		t.Fatal(err)
	}
	if err := second.Put(ctx, worker("a")); err != nil {
		t.Fatal(err)
	}
	if kv, err = b.JS.KeyValue(ctx, DefaultBucket); err != nil {
		t.Fatal(err)
	}
	if st, err := kv.Status(ctx); err != nil || st.TTL() != 3*time.Second {
		t.Fatalf("recreated bucket TTL %v (%v), want 3s", st.TTL(), err)
	}
}

// TestConcurrentOpenOtherLeases: processes given other leases open the
// missing bucket at once; every one of them opens it, all with one lease.
func TestConcurrentOpenOtherLeases(t *testing.T) {
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Options{Name: "lease-race-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	leases := []time.Duration{2 * time.Second, 3 * time.Second, 5 * time.Second, 7 * time.Second}
	got := make([]time.Duration, len(leases))
	errs := make([]error, len(leases))
	var wg sync.WaitGroup
	for i, l := range leases {
		wg.Go(func() {
			n, err := OpenNATS(ctx, b.JS, "", l, nil)
			if errs[i] = err; err == nil {
				got[i] = n.Lease()
			}
		})
	}
	wg.Wait()
	for i := range leases {
		if errs[i] != nil {
			t.Fatalf("lease %v: %v", leases[i], errs[i])
		}
		if got[i] != got[0] {
			t.Fatalf("leases %v: not one", got)
		}
	}
}
