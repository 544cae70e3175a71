package loadshare

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"kvrouter/internal/bus"
	"kvrouter/internal/cost"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestPeersShareLoad: two replicas on one NATS see each other's requests
// start and end, batched, and neither counts its own twice.
func TestPeersShareLoad(t *testing.T) {
	_, start := peerBus(t)
	newPeer := func(name string) *Peers { return start(name, 50*time.Millisecond) }
	a, c := newPeer("a"), newPeer("c")
	rank := cost.Rank{Worker: "w", DP: 1}
	want := func(p *Peers, n int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for p.load.Of(rank).Requests != n {
			if time.Now().After(deadline) {
				t.Fatalf("replica %s: %d requests on %v, want %d", p.replica, p.load.Of(rank).Requests, rank, n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// Replicas announce requests once they know of another.
	for _, p := range []*Peers{a, c} {
		for deadline := time.Now().Add(5 * time.Second); p.book.known.Load() == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("replica %s met no other", p.replica)
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
	sub, err := b.Conn.ChanSubscribe(loadSubject, seen)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	a := start("a", 20*time.Millisecond)
	rank := cost.Rank{Worker: "w", DP: 0}
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
	for deadline := time.Now().Add(5 * time.Second); c.load.Of(rank).Requests != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("c sees %d requests on %v, want 1", c.load.Of(rank).Requests, rank)
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
	m := NewMetrics(prometheus.NewRegistry())
	return b, func(name string, every time.Duration) *Peers {
		p := NewPeers(b.Conn, name, cost.NewLoad(), every, time.Minute, m, quiet(), time.Now)
		go p.Run(ctx)
		return p
	}
}

func TestPeerBook(t *testing.T) {
	load := cost.NewLoad()
	b := newPeerBook(load, 10*time.Second)
	t0 := time.Unix(0, 0)
	r := cost.Rank{Worker: "w", DP: 1}
	steps := []struct {
		msg  loadMsg
		at   time.Duration
		want cost.RankLoad
	}{
		{loadMsg{Replica: "p", Op: opStart, ID: "p/1", Worker: "w", Rank: 1, Prefill: 100, Blocks: 4}, 0, cost.RankLoad{PrefillTokens: 100, DecodeBlocks: 4, Requests: 1}},
		{loadMsg{Replica: "p", Op: opStart, ID: "p/1", Worker: "w", Rank: 1, Prefill: 100, Blocks: 4}, 0, cost.RankLoad{PrefillTokens: 100, DecodeBlocks: 4, Requests: 1}},
		{loadMsg{Replica: "p", Op: opStart, ID: "p/2", Worker: "w", Rank: 1, Prefill: 50, Blocks: 2}, 0, cost.RankLoad{PrefillTokens: 150, DecodeBlocks: 6, Requests: 2}},
		{loadMsg{Replica: "p", Op: opFirst, ID: "p/1"}, time.Second, cost.RankLoad{PrefillTokens: 50, DecodeBlocks: 6, Requests: 2}},
		{loadMsg{Replica: "p", Op: opFinish, ID: "p/1"}, time.Second, cost.RankLoad{PrefillTokens: 50, DecodeBlocks: 2, Requests: 1}},
		{loadMsg{Replica: "q", Op: opStart, ID: "q/1", Worker: "w", Rank: 1, Prefill: 10, Blocks: 1}, 5 * time.Second, cost.RankLoad{PrefillTokens: 60, DecodeBlocks: 3, Requests: 2}},
		// p's heartbeat no longer lists p/2: its finish was lost.
		{loadMsg{Replica: "p", Op: opAlive, IDs: nil}, 6 * time.Second, cost.RankLoad{PrefillTokens: 10, DecodeBlocks: 1, Requests: 1}},
	}
	for i, s := range steps {
		b.apply(s.msg, t0.Add(s.at))
		if got := load.Of(r); got != s.want {
			t.Fatalf("step %d: %+v, want %+v", i, got, s.want)
		}
	}
	if gone := b.expire(t0.Add(14 * time.Second)); len(gone) != 0 {
		t.Fatalf("expired early: %v", gone)
	}
	if gone := b.expire(t0.Add(15 * time.Second)); !reflect.DeepEqual(gone, []string{"q"}) || load.Of(r) != (cost.RankLoad{}) {
		t.Fatalf("expire: %v, load %+v", gone, load.Of(r))
	}
}
