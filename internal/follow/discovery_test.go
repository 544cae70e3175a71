package follow

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"kvrouter/internal/cost"
	"kvrouter/internal/discovery"
	"kvrouter/internal/router"
)

// TestDiscoveryRewatch: after a lost watch the router trusts no agent's
// source until a new watch is in step, and drops workers the new watch no
// longer lists (they left unseen).
func TestDiscoveryRewatch(t *testing.T) {
	r, err := router.New(router.Config{Weights: cost.DefaultWeights(), NoHints: true})
	if err != nil {
		t.Fatal(err)
	}
	d := &Discovery{Router: r, Metrics: NewMetrics(prometheus.NewRegistry()), Log: slog.New(slog.DiscardHandler), Now: time.Now,
		followers: map[string]*follower{}, refused: map[string]string{}}
	r.SetDiscoveryLive(false) // what Run does before a watch
	reg := func(id string) discovery.Worker {
		return discovery.Worker{ID: id, Model: "other", URL: "http://" + id, BlockSize: 4, DPSize: 1}
	}
	feed := func(cs ...discovery.Change) {
		ch := make(chan discovery.Change, len(cs))
		for _, c := range cs {
			ch <- c
		}
		close(ch)
		d.watch(context.Background(), ch)
	}
	feed(discovery.Change{Op: discovery.OpPut, ID: "x", Worker: reg("x")}, discovery.Change{Op: discovery.OpPut, ID: "y", Worker: reg("y")},
		discovery.Change{Op: discovery.OpSynced})
	if _, ok := r.Worker("y"); !ok || !r.Stats().DiscoveryLive {
		t.Fatal("first watch not applied")
	}
	r.SetDiscoveryLive(false) // what Run does when a watch ends
	feed(discovery.Change{Op: discovery.OpPut, ID: "x", Worker: reg("x")})
	if r.Stats().DiscoveryLive {
		t.Fatal("live before the new watch is in step")
	}
	feed(discovery.Change{Op: discovery.OpPut, ID: "x", Worker: reg("x")}, discovery.Change{Op: discovery.OpSynced})
	if _, ok := r.Worker("y"); ok {
		t.Fatal("a worker that left while the watch was down is still routed to")
	}
	if _, ok := r.Worker("x"); !ok || !r.Stats().DiscoveryLive {
		t.Fatal("rewatch not applied")
	}
}
