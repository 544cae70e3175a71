package serve

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"kvrouter/internal/kvevents"
)

// TestReplicasAgree: two routers on one NATS follow the same agents, so
// identical requests go to the same target, ties included; and each sees
// the other's requests in flight.
func TestReplicasAgree(t *testing.T) {
	h := newHarness(t)
	engines := map[string]*engine{}
	var agents []*agent
	for i := range 4 {
		id := fmt.Sprint("w", i)
		engines[id] = newEngine(t, testModel)
		agents = append(agents, h.agent(id, engines[id]))
	}
	shared := prompt(10, 2)
	for i, a := range agents {
		// Everybody holds the shared prefix (ties); w1 holds more of the
		// first prompt.
		a.store(a.rank(), shared, "", kvevents.TierDevice)
		if i == 1 {
			a.store(a.rank(), append(append([]uint32(nil), shared...), prompt(5000, 3)...), "", kvevents.TierDevice)
		}
		a.ready(a.rank(), a.owner())
	}
	g1, g2 := h.service(nil), h.service(nil)
	long := completionBody(append(append([]uint32(nil), shared...), prompt(5000, 3)...), "")
	for _, g := range []*Service{g1, g2} {
		waitWorkers(t, g, 4)
		// Every agent's snapshot, not only w1's: a replica missing one
		// worker's shared prefix breaks the ties among fewer workers.
		eventually(t, "the inventory", func() bool {
			if g.route(t, long).OverlapBlocks != 5 {
				return false
			}
			cs := g.route(t, completionBody(shared, "")).Candidates
			for _, c := range cs {
				if c.OverlapBlocks != 2 {
					return false
				}
			}
			return len(cs) == 4
		})
	}
	targets := map[string]bool{}
	for i := range 12 {
		body := completionBody(append(append([]uint32(nil), shared...), prompt(uint32(100000*(i+1)), 2)...), "")
		r1, r2 := g1.route(t, body), g2.route(t, body)
		if r1.Target != r2.Target {
			t.Fatalf("request %d: %+v vs %+v", i, r1.Target, r2.Target)
		}
		targets[r1.Target.WorkerID] = true
	}
	if len(targets) < 2 {
		t.Fatalf("ties always broken the same way: %v", targets)
	}

	// A request in flight through g1 shows on g2.
	target := g1.route(t, long).Target.WorkerID
	e := engines[target]
	e.mu.Lock()
	e.hold = make(chan struct{})
	e.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		resp, err := http.Post(g1.url()+"/v1/completions", "application/json", strings.NewReader(strings.Replace(long, `"max_tokens":2`, `"max_tokens":2,"stream":true`, 1)))
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		done <- err
	}()
	active := func(g *Service) int {
		for _, c := range g.route(t, long).Candidates {
			if c.WorkerID == target {
				return c.ActiveRequests
			}
		}
		return -1
	}
	eventually(t, "g2 to see g1's request", func() bool { return active(g2) == 1 })
	close(e.hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	eventually(t, "g2 to see it finish", func() bool { return active(g2) == 0 && active(g1) == 0 })
}
