package relay

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"kvrouter/internal/bus"
	"kvrouter/internal/index"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvhash"
)

// indexSink is the consumer side as a router builds it: an index plus
// per-source readiness.
type indexSink struct {
	mu    sync.Mutex
	ix    *index.Index
	ready map[index.Source]bool
}

func newIndexSink(t *testing.T) *indexSink {
	ix, err := index.New(index.Config{BlockSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	return &indexSink{ix: ix, ready: map[index.Source]bool{}}
}

func (s *indexSink) Reset(src index.Source) {
	s.ix.RemoveSource(src)
	s.mu.Lock()
	s.ready[src] = false
	s.mu.Unlock()
}
func (s *indexSink) Apply(src index.Source, ops []index.Op) error { return s.ix.Apply(src, ops...) }
func (s *indexSink) SetReady(src index.Source, r bool) {
	s.mu.Lock()
	s.ready[src] = r
	s.mu.Unlock()
}
func (s *indexSink) Gone(src index.Source) {
	s.ix.RemoveSource(src)
	s.mu.Lock()
	delete(s.ready, src)
	s.mu.Unlock()
}
func (s *indexSink) isReady(src index.Source) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready[src]
}

// agent is the producer side: a local index whose changes are committed
// to the stream.
type agent struct {
	ix  *index.Index
	pub *Publisher
	rdy map[index.Source]bool
}

func newAgent(t *testing.T, b *bus.Bus, prefix string) *agent {
	return newAgentOn(t, b.Conn, prefix, 0)
}

// newAgentOn starts an agent on nc whose heartbeat beats every heartbeat
// (0: the default).
func newAgentOn(t *testing.T, nc *nats.Conn, prefix string, heartbeat time.Duration) *agent {
	ix, _ := index.New(index.Config{BlockSize: 4})
	a := &agent{ix: ix, pub: NewPublisher(nc, prefix, nil), rdy: map[index.Source]bool{}}
	a.pub.Heartbeat = heartbeat
	if err := a.pub.ServeSnapshots(func() []State {
		var out []State
		for _, s := range a.ix.Sources() {
			out = append(out, State{Source: s, Ready: a.rdy[s], Ops: a.ix.Dump(s)})
		}
		return out
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.pub.Close)
	return a
}

func (a *agent) store(t *testing.T, src index.Source, tokens []uint32, hashes []uint64, parent uint64, hasParent bool) {
	t.Helper()
	op := index.Op{Kind: index.OpStore, Tier: kvevents.TierDevice, Hashes: hashes, Parent: parent, HasParent: hasParent,
		Local: kvhash.LocalHashes(tokens, 4, kvhash.Seed), BlockSize: 4}
	if err := a.pub.Commit(src, KindOps, []index.Op{op}, func() error { return a.ix.Apply(src, op) }); err != nil {
		t.Fatal(err)
	}
}

func (a *agent) setReady(t *testing.T, src index.Source) {
	if err := a.pub.Commit(src, KindReady, nil, func() error { a.rdy[src] = true; return nil }); err != nil {
		t.Fatal(err)
	}
}

func (a *agent) reset(t *testing.T, src index.Source) {
	t.Helper()
	if err := a.pub.Commit(src, KindReset, nil, func() error { a.ix.RemoveSource(src); a.rdy[src] = false; return nil }); err != nil {
		t.Fatal(err)
	}
}

// lose applies op as a commit whose message never reaches anyone.
func (a *agent) lose(t *testing.T, src index.Source, op index.Op) {
	t.Helper()
	a.pub.mu.Lock()
	defer a.pub.mu.Unlock()
	a.pub.cursor++
	if err := a.ix.Apply(src, op); err != nil {
		t.Fatal(err)
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func depth(ix *index.Index, local []uint64, src index.Source) int {
	for _, m := range ix.Match(local, index.MatchOptions{}) {
		if m.Source() == src {
			return int(m.Depth)
		}
	}
	return 0
}

func TestFollowerInitialInventoryGapAndEpoch(t *testing.T) {
	b, err := bus.Open(context.Background(), bus.Options{Name: "relay-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	prefix := Prefix("w:1")
	src := index.WorkerRank("w:1", 0)
	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	local := kvhash.LocalHashes(tokens, 4, kvhash.Seed)

	a := newAgent(t, b, prefix)
	// Inventory that exists before any router attaches.
	a.store(t, src, tokens[:4], []uint64{101}, 0, false)
	a.setReady(t, src)

	sink := newIndexSink(t)
	var resyncs []string
	var rmu sync.Mutex
	f := &Follower{NC: b.Conn, Prefix: prefix, Sink: sink, Resynced: func(r string) { rmu.Lock(); resyncs = append(resyncs, r); rmu.Unlock() }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()

	eventually(t, "initial inventory", func() bool { return depth(sink.ix, local, src) == 1 && sink.isReady(src) })

	// Live.
	a.store(t, src, tokens[4:8], []uint64{102}, 101, true)
	eventually(t, "live store", func() bool { return depth(sink.ix, local, src) == 2 })

	// A message lost on the wire: the agent's state moves on, the cursor
	// skips. The follower must notice at the next message and resync.
	a.lose(t, src, index.Op{Kind: index.OpStore, Tier: kvevents.TierDevice, Hashes: []uint64{103}, Parent: 102, HasParent: true,
		Local: local[2:3], BlockSize: 4})
	a.setReady(t, src)
	eventually(t, "resync after gap", func() bool { return depth(sink.ix, local, src) == 3 })

	// The agent restarts: a new epoch with an empty inventory.
	a.pub.Close()
	a2 := newAgent(t, b, prefix)
	a2.store(t, src, tokens[:4], []uint64{201}, 0, false)
	eventually(t, "resync after restart", func() bool { return depth(sink.ix, local, src) == 1 })
	if sink.isReady(src) {
		t.Fatal("source ready although the restarted agent never said so")
	}
	a2.setReady(t, src)
	eventually(t, "ready again", func() bool { return sink.isReady(src) })

	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v", err)
	}
	rmu.Lock()
	defer rmu.Unlock()
	if !reflect.DeepEqual(resyncs, []string{"start", "gap", "epoch"}) {
		t.Fatalf("resyncs = %v", resyncs)
	}
}

func TestWireRoundTrip(t *testing.T) {
	in := Message{Epoch: 7, Cursor: 9, Source: index.CacheOwner("o"), Kind: KindOps, Ops: []index.Op{
		{Kind: index.OpStore, Tier: kvevents.TierExternal, Hashes: []uint64{1 << 63, 2}, Parent: 5, HasParent: true, Local: []uint64{3, 4}, BlockSize: 16},
		{Kind: index.OpStore, Hashes: []uint64{6}, Local: []uint64{7}, SaltUnknown: true},
		{Kind: index.OpClear, AllTiers: true},
	}}
	b, err := Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip\n got %+v\nwant %+v", out, in)
	}
	b2, _ := Encode(out)
	if !bytes.Equal(b, b2) {
		t.Fatal("re-encoding differs")
	}
}

func TestDecodeRejects(t *testing.T) {
	bad := []Message{
		{Kind: KindOps}, // no source
		{Kind: KindOps, Source: index.Source{Worker: "w", Owner: "o"}}, // both
		{Kind: 99, Source: index.WorkerRank("w", 0)},
		{Kind: KindOps, Source: index.WorkerRank("w", 0), Ops: []index.Op{{Kind: 9}}},
	}
	for i, m := range bad {
		b, _ := Encode(m)
		if _, err := Decode(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("case %d: err = %v, want ErrMalformed", i, err)
		}
	}
	if _, err := Decode([]byte{0xc1}); !errors.Is(err, ErrMalformed) {
		t.Errorf("garbage: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	m, _ := Encode(Message{Epoch: 1, Cursor: 2, Source: index.WorkerRank("w", 1), Kind: KindOps,
		Ops: []index.Op{{Kind: index.OpStore, Hashes: []uint64{1}, Local: []uint64{2}, BlockSize: 4}}})
	f.Add(m)
	e, _ := Encode(Message{Kind: KindEnd, Frame: 3})
	f.Add(e)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			return
		}
		b2, err := Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := Decode(b2)
		if err != nil || !reflect.DeepEqual(m, m2) {
			t.Fatalf("unstable round trip: %v", err)
		}
	})
}

// TestSilence: an agent is silent once more than the limit passed since
// the last word heard from it, reported once; a word ends it.
func TestSilence(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	s := silence{limit: 3 * time.Second}
	steps := []struct {
		at          time.Duration
		heard       bool
		fell, resum bool
	}{
		{at: 0, fell: false}, // nothing heard yet: no clock to count from
		{at: 0, heard: true},
		{at: 3 * time.Second},
		{at: 3*time.Second + 1, fell: true},
		{at: 10 * time.Second}, // once
		{at: 11 * time.Second, heard: true, resum: true},
		{at: 13 * time.Second},
		{at: 14*time.Second + 1, fell: true},
	}
	for i, st := range steps {
		now := t0.Add(st.at)
		if st.heard {
			if got := s.heard(now); got != st.resum {
				t.Fatalf("step %d: heard reported resumed %v, want %v", i, got, st.resum)
			}
			continue
		}
		if got := s.check(now); got != st.fell {
			t.Fatalf("step %d: check at %v fell %v, want %v", i, st.at, got, st.fell)
		}
	}
}

// TestFollowerSilentAgent: an agent that misses three heartbeats has its
// sources marked not ready at the follower's next tick, and a word from it
// makes the ones it said were ready ready again; the clock and the ticks
// are the test's.
func TestFollowerSilentAgent(t *testing.T) {
	b, err := bus.Open(context.Background(), bus.Options{Name: "relay-silence-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	prefix := Prefix("w:2")
	src, other := index.WorkerRank("w:2", 0), index.WorkerRank("w:2", 1)
	tokens := []uint32{1, 2, 3, 4}
	a := newAgentOn(t, b.Conn, prefix, time.Hour) // beats only when told to
	a.store(t, src, tokens, []uint64{101}, 0, false)
	a.store(t, other, tokens, []uint64{101}, 0, false)
	a.setReady(t, src) // other stays not ready

	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	ticks := make(chan time.Time)
	var silent []bool
	sink := newIndexSink(t)
	f := &Follower{NC: b.Conn, Prefix: prefix, Sink: sink, Heartbeat: time.Second, Now: clock, ticks: ticks,
		Silent: func(s bool) { mu.Lock(); silent = append(silent, s); mu.Unlock() }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	defer func() { cancel(); <-done }()
	eventually(t, "initial inventory", func() bool { return sink.isReady(src) })

	advance(3 * time.Second)
	ticks <- clock()
	ticks <- clock() // the first tick was handled once the second is taken
	if !sink.isReady(src) {
		t.Fatal("not ready after exactly three heartbeats' time")
	}
	advance(time.Millisecond)
	ticks <- clock()
	ticks <- clock()
	if sink.isReady(src) || sink.isReady(other) {
		t.Fatal("a silent agent's source still ready")
	}
	a.pub.mu.Lock()
	a.pub.announce()
	a.pub.mu.Unlock()
	eventually(t, "ready again after a heartbeat", func() bool { return sink.isReady(src) })
	if sink.isReady(other) {
		t.Fatal("a source the agent never said was ready became ready")
	}
	mu.Lock()
	defer mu.Unlock()
	if !reflect.DeepEqual(silent, []bool{true, false}) {
		t.Fatalf("silence reported %v", silent)
	}
}
