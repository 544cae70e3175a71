package relay

import (
	"context"
	"errors"
	"math"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"kvrouter/internal/bus"
	"kvrouter/internal/index"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvhash"
)

// natsConn connects to a fresh server with its own defaults but
// maxPayload (0: NATS's default of 1 MiB, which production servers keep;
// the test bus raises it).
func natsConn(t *testing.T, maxPayload int32) *nats.Conn {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true, MaxPayload: maxPayload})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server did not start")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// following is a Follower running until the test ends.
type following struct {
	mu      sync.Mutex
	resyncs []string
}

func follow(t *testing.T, nc *nats.Conn, prefix string, sink Sink, tweak func(*Follower)) *following {
	fl := &following{}
	f := &Follower{NC: nc, Prefix: prefix, Sink: sink, Resynced: func(r string) {
		fl.mu.Lock()
		fl.resyncs = append(fl.resyncs, r)
		fl.mu.Unlock()
	}}
	if tweak != nil {
		tweak(f)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return fl
}

// synced waits for the first snapshot.
func (fl *following) synced(t *testing.T) {
	t.Helper()
	eventually(t, "the first snapshot", func() bool { return len(fl.reasons()) > 0 })
}

func (fl *following) reasons() []string {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return slices.Clone(fl.resyncs)
}

// busySink holds the first Apply after it is armed until release closes,
// like a router whose index is busy for a while.
type busySink struct {
	*indexSink
	armed   atomic.Bool
	held    chan struct{}
	release chan struct{}
}

func newBusySink(t *testing.T) *busySink {
	return &busySink{indexSink: newIndexSink(t), held: make(chan struct{}), release: make(chan struct{})}
}

func (s *busySink) Apply(src index.Source, ops []index.Op) error {
	if s.armed.CompareAndSwap(true, false) {
		close(s.held)
		<-s.release
	}
	return s.indexSink.Apply(src, ops)
}

// burstWhileBusy blocks the follower in an Apply, publishes a burst of n
// messages that ends with the source's reset, makes sure all of it reached
// the follower's connection, and lets the follower go on.
func burstWhileBusy(t *testing.T, b *bus.Bus, a *agent, sink *busySink, src index.Source, n int) {
	t.Helper()
	sink.armed.Store(true)
	a.store(t, src, []uint32{5, 6, 7, 8}, []uint64{102}, 0, false)
	select {
	case <-sink.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the follower never applied the store")
	}
	for range n {
		a.setReady(t, src)
	}
	a.reset(t, src)
	// One connection publishes and subscribes: the server answers the
	// flush after it delivered the burst, and the client reads in order.
	if err := b.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	close(sink.release)
}

// A burst far larger than any fixed channel, arriving while the sink is
// busy, is applied whole: the reset at its end withdraws the source.
func TestFollowerBusySinkLosesNothing(t *testing.T) {
	b, err := bus.Open(context.Background(), bus.Options{Name: "relay-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	prefix, src := Prefix("w:1"), index.WorkerRank("w:1", 0)
	local := kvhash.LocalHashes([]uint32{1, 2, 3, 4}, 4, kvhash.Seed)
	a := newAgent(t, b, prefix)
	a.store(t, src, []uint32{1, 2, 3, 4}, []uint64{101}, 0, false)
	a.setReady(t, src)
	sink := newBusySink(t)
	fl := follow(t, b.Conn, prefix, sink, nil)
	eventually(t, "in step", func() bool { return sink.isReady(src) && depth(sink.ix, local, src) == 1 })

	burstWhileBusy(t, b, a, sink, src, 10000)
	eventually(t, "the reset that ends the burst", func() bool { return !sink.isReady(src) && depth(sink.ix, local, src) == 0 })
	if r := fl.reasons(); !reflect.DeepEqual(r, []string{"start"}) {
		t.Fatalf("resyncs %v: nothing was lost, none was needed", r)
	}
}

// A follower that cannot hold the burst drops it, says so and resyncs.
func TestFollowerResyncsAfterBacklogOverflow(t *testing.T) {
	b, err := bus.Open(context.Background(), bus.Options{Name: "relay-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	prefix, src := Prefix("w:1"), index.WorkerRank("w:1", 0)
	tokens := []uint32{1, 2, 3, 4}
	local := kvhash.LocalHashes(tokens, 4, kvhash.Seed)
	a := newAgent(t, b, prefix)
	a.store(t, src, tokens, []uint64{101}, 0, false)
	a.setReady(t, src)
	sink := newBusySink(t)
	fl := follow(t, b.Conn, prefix, sink, func(f *Follower) { f.MaxBacklog = 4 << 10 })
	eventually(t, "in step", func() bool { return sink.isReady(src) })

	burstWhileBusy(t, b, a, sink, src, 500)
	eventually(t, "the resync after the overflow", func() bool {
		return slices.Contains(fl.reasons(), "overflow") && !sink.isReady(src)
	})
	a.store(t, src, tokens, []uint64{101}, 0, false)
	a.setReady(t, src)
	eventually(t, "in step again", func() bool { return sink.isReady(src) && depth(sink.ix, local, src) == 1 })
}

// The agent's heartbeat reveals a lost last message: no later message
// would have.
func TestHeartbeatRevealsLostTail(t *testing.T) {
	b, err := bus.Open(context.Background(), bus.Options{Name: "relay-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	prefix, src := Prefix("w:1"), index.WorkerRank("w:1", 0)
	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	local := kvhash.LocalHashes(tokens, 4, kvhash.Seed)
	a := newAgentOn(t, b.Conn, prefix, 10*time.Millisecond)
	a.store(t, src, tokens[:4], []uint64{101}, 0, false)
	a.setReady(t, src)
	sink := newIndexSink(t)
	fl := follow(t, b.Conn, prefix, sink, nil)
	eventually(t, "in step", func() bool { return sink.isReady(src) && depth(sink.ix, local, src) == 1 })

	a.lose(t, src, index.Op{Kind: index.OpStore, Tier: kvevents.TierDevice, Hashes: []uint64{102}, Parent: 101, HasParent: true,
		Local: local[1:2], BlockSize: 4})
	eventually(t, "the lost store", func() bool { return sink.isReady(src) && depth(sink.ix, local, src) == 2 })
	if r := fl.reasons(); !reflect.DeepEqual(r, []string{"start", "gap"}) {
		t.Fatalf("resyncs %v", r)
	}
}

// chain returns a root store of n blocks with 9-byte engine hashes (as
// real ones encode) and the tokens it covers.
func chain(n int) index.Op {
	hashes, tokens := make([]uint64, n), make([]uint32, 4*n)
	for i := range hashes {
		hashes[i] = 1<<63 | uint64(i)
	}
	for i := range tokens {
		tokens[i] = uint32(i)
	}
	return index.Op{Kind: index.OpStore, Tier: kvevents.TierDevice, Hashes: hashes, Local: kvhash.LocalHashes(tokens, 4, kvhash.Seed), BlockSize: 4}
}

// Live messages and snapshot frames larger than the server's max_payload
// are cut, and both a live follower and a late one end up holding exactly
// what the agent holds.
func TestMessagesFitMaxPayload(t *testing.T) {
	for _, tc := range []struct {
		name       string
		maxPayload int32
		blocks     int
	}{
		// Some 1.3 MB on the wire: a 70K-token prompt at SGLang's page size 1.
		{"default", 0, 70000},
		{"16KiB", 16 << 10, 5000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := natsConn(t, tc.maxPayload)
			prefix, src := Prefix("w:1"), index.WorkerRank("w:1", 0)
			a := newAgentOn(t, nc, prefix, 0)
			live := newIndexSink(t)
			fl := follow(t, nc, prefix, live, nil)
			fl.synced(t)
			a.setReady(t, src)
			eventually(t, "in step", func() bool { return live.isReady(src) })

			op := chain(tc.blocks)
			if err := a.pub.Commit(src, KindOps, []index.Op{op}, func() error { return a.ix.Apply(src, op) }); err != nil {
				t.Fatal(err)
			}
			rm := index.Op{Kind: index.OpRemove, Tier: kvevents.TierDevice, Hashes: op.Hashes[tc.blocks/4 : tc.blocks*3/4]}
			if err := a.pub.Commit(src, KindOps, []index.Op{rm}, func() error { return a.ix.Apply(src, rm) }); err != nil {
				t.Fatal(err)
			}
			want := a.ix.Dump(src)
			late := newIndexSink(t)
			follow(t, nc, prefix, late, nil)
			for name, s := range map[string]*indexSink{"live": live, "late": late} {
				eventually(t, name+" follower to hold the agent's blocks", func() bool {
					// Held first: a Dump of every poll would be slow.
					return s.isReady(src) && s.ix.Held(src) == a.ix.Held(src) && reflect.DeepEqual(s.ix.Dump(src), want)
				})
			}
			if r := fl.reasons(); !reflect.DeepEqual(r, []string{"start"}) {
				t.Fatalf("live follower resynced: %v", r)
			}
		})
	}
}

// A change whose message cannot be published at all makes followers resync
// at once, not when a later message or heartbeat happens to come.
func TestUnpublishableCommitMakesFollowersResync(t *testing.T) {
	prefix, src := Prefix("w:1"), index.WorkerRank("w:1", 0)
	op := chain(1)
	// A server that takes every control message but no store: one block
	// cannot be cut.
	worst, _ := Encode(Message{Epoch: math.MaxUint64, Cursor: math.MaxUint64, Source: src, Kind: KindOps, Ops: []index.Op{op}})
	small, _ := Encode(Message{Epoch: math.MaxUint64, Cursor: math.MaxUint64, Frame: math.MaxInt, Source: src, Kind: KindReady})
	limit := len(worst) - 1
	if len(small) > limit {
		t.Fatalf("control messages (%d bytes) do not fit below a store (%d)", len(small), len(worst))
	}
	nc := natsConn(t, int32(limit))
	a := newAgentOn(t, nc, prefix, time.Hour)
	sink := newIndexSink(t)
	follow(t, nc, prefix, sink, nil).synced(t)
	a.setReady(t, src)
	eventually(t, "in step", func() bool { return sink.isReady(src) })

	err := a.pub.Commit(src, KindOps, []index.Op{op}, func() error { return a.ix.Apply(src, op) })
	if !errors.Is(err, nats.ErrMaxPayload) {
		t.Fatalf("Commit: %v, want ErrMaxPayload", err)
	}
	eventually(t, "the follower to give up the source", func() bool { return !sink.isReady(src) })
}

// Cut pieces applied in order leave an index exactly as the whole message
// does, and each piece fits.
func TestSplitKeepsIdentities(t *testing.T) {
	src := index.WorkerRank("w", 0)
	whole, _ := index.New(index.Config{BlockSize: 4})
	root := chain(600)
	base := index.Op{Kind: root.Kind, Tier: root.Tier, Hashes: root.Hashes[:100], Local: root.Local[:100], BlockSize: 4}
	under := index.Op{Kind: root.Kind, Tier: root.Tier, Hashes: root.Hashes[100:], Local: root.Local[100:], BlockSize: 4,
		Parent: root.Hashes[99], HasParent: true}
	if err := whole.Apply(src, base, under); err != nil {
		t.Fatal(err)
	}
	dump := whole.Dump(src)
	dump[0].Tier = kvevents.TierHost // identities and depths, as snapshots carry them
	ops := []index.Op{under, dump[0], {Kind: index.OpRemove, Tier: kvevents.TierDevice, Hashes: root.Hashes[300:500]}, {Kind: index.OpClear, Tier: kvevents.TierExternal}}
	if err := whole.Apply(src, ops...); err != nil {
		t.Fatal(err)
	}

	const limit = 1 << 10
	parts, err := split(Message{Epoch: 1, Source: src, Kind: KindOps, Ops: ops}, limit)
	if err != nil {
		t.Fatal(err)
	}
	cut, _ := index.New(index.Config{BlockSize: 4})
	if err := cut.Apply(src, base); err != nil {
		t.Fatal(err)
	}
	for i, m := range parts {
		if m.Cursor != 0 || m.Frame != 0 {
			t.Fatalf("part %d: cursor %d frame %d, want the message's own", i, m.Cursor, m.Frame)
		}
		m.Cursor = uint64(i + 1)
		b, _ := Encode(m)
		if len(b) > limit {
			t.Fatalf("part %d: %d bytes", i, len(b))
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := cut.Apply(src, got.Ops...); err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
	}
	if len(parts) < 10 || !reflect.DeepEqual(cut.Dump(src), whole.Dump(src)) {
		t.Fatalf("%d parts; cut and whole differ", len(parts))
	}

	if _, err := split(Message{Epoch: 1, Source: src, Kind: KindOps, Ops: []index.Op{chain(1)}}, 40); !errors.Is(err, nats.ErrMaxPayload) {
		t.Fatalf("an op of one block: %v, want ErrMaxPayload", err)
	}
}
