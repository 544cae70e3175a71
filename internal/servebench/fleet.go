// This file holds the bench fleet's state agents and the wait for the service to take them in.

package servebench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"kvrouter/internal/discovery"
	"kvrouter/internal/index"
	"kvrouter/internal/relay"
	"kvrouter/internal/serve"
)

// model is the one model the bench fleet serves.
const model = "bench"

// nullCompletion is the whole answer: OpenAI's shape, with the usage the
// router reads on the way back.
var nullCompletion = []byte(`{"id":"cmpl-null","object":"text_completion","model":"` + model +
	`","choices":[{"index":0,"text":"","finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)

// agents play the fleet's state agents: each registers its worker through
// the discovery registry the router watches and answers the router's
// snapshot requests on the event plane, as a real agent does. Their
// inventory is rebuilt from the workload on each request, not kept.
type agents struct {
	nc   *nats.Conn
	pubs []*relay.Publisher
}

// workerID names the worker serving global rank set i.
func workerID(i int) string { return fmt.Sprintf("bench-w%04d", i) }

func ownerOf(worker string, rank int) string { return fmt.Sprintf("%s-owner-%d", worker, rank) }

// startAgents registers ranks/dp workers of dp ranks each (the last one
// may have fewer), every rank with a cache owner and a hint endpoint.
func startAgents(ctx context.Context, natsURL string, reg discovery.Registry, w *workload, backendURL string, ranks, dp int) (*agents, error) {
	nc, err := nats.Connect(natsURL, nats.Name("kvrouter-bench-agents"))
	if err != nil {
		return nil, fmt.Errorf("agents: nats %s: %w", natsURL, err)
	}
	a := &agents{nc: nc}
	for start := 0; start < ranks; start += dp {
		size := min(dp, ranks-start)
		if err := a.start(ctx, reg, w, backendURL, start, size, dp); err != nil {
			a.close()
			return nil, err
		}
	}
	return a, nil
}

func (a *agents) start(ctx context.Context, reg discovery.Registry, w *workload, backendURL string, start, size, dp int) error {
	id := workerID(start / dp)
	dw := discovery.Worker{ID: id, Model: model, URL: backendURL, Engine: "sglang", BlockSize: blockSize,
		DPSize: size, Owners: map[string]string{}, Events: relay.Prefix(id)}
	eps := map[string]string{}
	for r := range size {
		// Endpoints are advertised, never dialled: the backend is null.
		eps[strconv.Itoa(r)] = fmt.Sprintf("tcp://127.0.0.1:%d", 30000+start+r)
		dw.Owners[strconv.Itoa(r)] = ownerOf(id, r)
	}
	var err error
	for _, kv := range []struct {
		k string
		v any
	}{{"router_hint_source_control_endpoints", eps}, {"router_hint_worker_type", "aggregated"}, {"router_hint", true}} {
		if dw.RuntimeData, err = dw.RuntimeData.Set(kv.k, kv.v); err != nil {
			return fmt.Errorf("agent %s: %w", id, err)
		}
	}
	pub := relay.NewPublisher(a.nc, dw.Events, discard)
	a.pubs = append(a.pubs, pub)
	if err := pub.ServeSnapshots(func() []relay.State {
		var out []relay.State
		for r := range size {
			out = append(out,
				relay.State{Source: index.WorkerRank(id, r), Ready: true, Ops: w.rankOps(start + r)},
				relay.State{Source: index.CacheOwner(ownerOf(id, r)), Ready: true, Ops: w.ownerOps(start + r)})
		}
		return out
	}); err != nil {
		return fmt.Errorf("agent %s: %w", id, err)
	}
	if err := discovery.Announce(ctx, reg, dw); err != nil {
		return fmt.Errorf("agent %s: register: %w", id, err)
	}
	return nil
}

func (a *agents) close() {
	for _, p := range a.pubs {
		p.Close()
	}
	a.nc.Close()
}

// errNotInStep is a fleet the router did not take in within the setup
// limit.
var errNotInStep = errors.New("the router did not take in the fleet")

// waitInStep waits until the router knows every source, each ready (its
// snapshot applied) and trusted (the discovery watch in step).
func waitInStep(ctx context.Context, g *serve.Service, sources int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		st := g.Router.Stats()
		if st.DiscoveryLive && st.Sources == sources && st.NotReady == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w within %v: %d of %d sources, %d not ready, discovery live %v",
				errNotInStep, limit, st.Sources, sources, st.NotReady, st.DiscoveryLive)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
