package gateway

import (
	"context"
	"strconv"
	"testing"
	"time"

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
