package gateway

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"kvrouter/internal/bus"
	"kvrouter/internal/router"
	"kvrouter/internal/schedule"
)

// TestPeersShareLoad: two replicas on one NATS see each other's requests
// start and end, batched, and neither counts its own twice.
func TestPeersShareLoad(t *testing.T) {
	_, start := peerBus(t)
	newPeer := func(name string) *Peers { return start(name, 50*time.Millisecond) }
	a, c := newPeer("a"), newPeer("c")
	rank := schedule.Rank{Worker: "w", DP: 1}
	want := func(p *Peers, n int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for p.Load.Of(rank).Requests != n {
			if time.Now().After(deadline) {
				t.Fatalf("replica %s: %d requests on %v, want %d", p.Replica, p.Load.Of(rank).Requests, rank, n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// Replicas announce requests once they know of another.
	for _, p := range []*Peers{a, c} {
		for deadline := time.Now().Add(5 * time.Second); p.book.known.Load() == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("replica %s met no other", p.Replica)
			}
		}
	}
	// More than one payload's worth, so that batches split.
	n := batchMax + 10
	for i := range n {
		a.Start("a/"+strconv.Itoa(i), rank, 100, 4)
	}
	c.Start("c/1", rank, 10, 1)
	want(c, n+1)
	want(a, n+1)
	for i := range n {
		a.Finish("a/" + strconv.Itoa(i))
	}
	want(c, 1)
	want(a, 1)
	c.Finish("c/1")
	want(a, 0)
	want(c, 0)
}

// TestLonePeerAnnouncesOnlyHeartbeats: a replica alone on NATS sends no
// per-request messages; once another appears, both share what starts next.
func TestLonePeerAnnouncesOnlyHeartbeats(t *testing.T) {
	b, start := peerBus(t)
	seen := make(chan *nats.Msg, 64)
	sub, err := b.Conn.ChanSubscribe(LoadSubject, seen)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	a := start("a", 20*time.Millisecond)
	rank := schedule.Rank{Worker: "w", DP: 0}
	a.Start("a/alone", rank, 100, 4)
	a.Finish("a/alone")
	heartbeats := 0
	for heartbeats < 3 {
		select {
		case nm := <-seen:
			var batch loadBatch
			if err := json.Unmarshal(nm.Data, &batch); err != nil {
				t.Fatal(err)
			}
			for _, msg := range batch.Msgs {
				if msg.Op != opAlive {
					t.Fatalf("a lone replica announced %+v", msg)
				}
				heartbeats++
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%d heartbeats in 5 s", heartbeats)
		}
	}
	c := start("c", time.Hour)
	for deadline := time.Now().Add(5 * time.Second); a.book.known.Load() == 0 || c.book.known.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the replicas did not meet")
		}
	}
	a.Start("a/shared", rank, 100, 4)
	for deadline := time.Now().Add(5 * time.Second); c.Load.Of(rank).Requests != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("c sees %d requests on %v, want 1", c.Load.Of(rank).Requests, rank)
		}
	}
}

// peerBus starts an embedded NATS for the test and returns it with a
// function starting a replica on it that heartbeats every given interval.
func peerBus(t *testing.T) (*bus.Bus, func(name string, every time.Duration) *Peers) {
	t.Helper()
	b, err := bus.Open(context.Background(), bus.Options{Name: t.Name(), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	m := NewMetrics(func() router.Stats { return router.Stats{} })
	return b, func(name string, every time.Duration) *Peers {
		p := NewPeers(b.Conn, name, schedule.NewLoad(), every, time.Minute, m, quiet(), time.Now)
		go p.Run(ctx)
		return p
	}
}
