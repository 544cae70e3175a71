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
	b, err := bus.Open(context.Background(), bus.Options{Name: "peers-test", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := NewMetrics(func() router.Stats { return router.Stats{} })
	newPeer := func(name string) *Peers {
		p := NewPeers(b.Conn, name, schedule.NewLoad(), 50*time.Millisecond, time.Minute, m, quiet(), time.Now)
		go p.Run(ctx)
		return p
	}
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
	b, err := bus.Open(context.Background(), bus.Options{Name: "lone-test", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	seen := make(chan *nats.Msg, 64)
	sub, err := b.Conn.ChanSubscribe(LoadSubject, seen)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	m := NewMetrics(func() router.Stats { return router.Stats{} })
	a := NewPeers(b.Conn, "a", schedule.NewLoad(), 20*time.Millisecond, time.Minute, m, quiet(), time.Now)
	go a.Run(ctx)
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
	c := NewPeers(b.Conn, "c", schedule.NewLoad(), time.Hour, time.Minute, m, quiet(), time.Now)
	go c.Run(ctx)
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
