// This file holds the fault injector: one fault at a time, chosen at random, each undone before the next.
package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"time"

	"kvrouter/internal/cluster"
	"kvrouter/internal/mocker"
)

// Fault kinds, as the result counts them.
const (
	FaultEngineKill   = "engine_kill"        // kill -9 an engine, restart it
	FaultAgentKill    = "agent_kill"         // kill -9 an agent, restart it
	FaultRouterKill   = "router_kill"        // kill -9 a router replica, restart it
	FaultEngineFreeze = "engine_freeze"      // SIGSTOP an engine, SIGCONT it
	FaultPeerKill     = "peer_kill_mid_pull" // kill -9 the engine a hinted request pulls from
	FaultNATSStop     = "nats_server_stop"   // stop a NATS server, start it again
)

var kinds = []string{FaultEngineKill, FaultAgentKill, FaultRouterKill, FaultEngineFreeze, FaultPeerKill, FaultNATSStop}

// injector injects faults into c.
type injector struct {
	c      *cluster.Cluster
	rng    *rand.Rand
	log    *slog.Logger
	hc     *http.Client
	ref    *mocker.Reference
	tally  *tally
	faults map[string]int
	// pullMisses counts peer kills whose request got no hint (the engine
	// was killed all the same, and counted as FaultEngineKill).
	pullMisses int
}

// hold is how long a fault lasts before it is undone.
func (in *injector) hold() time.Duration {
	return 500*time.Millisecond + time.Duration(in.rng.IntN(2500))*time.Millisecond
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// run injects faults until the deadline, every kind in turn in a random
// order (so that a short run sees each), with pauses between them.
func (in *injector) run(ctx context.Context, until time.Time) error {
	var order []string
	for time.Now().Before(until) && ctx.Err() == nil {
		if len(order) == 0 {
			order = append([]string(nil), kinds...)
			in.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		kind := order[0]
		order = order[1:]
		start := time.Now()
		counted, err := in.inject(ctx, kind)
		if err != nil {
			return fmt.Errorf("chaos: fault %s: %w", kind, err)
		}
		in.faults[counted]++
		in.log.Info("chaos: fault done", "kind", counted, "took", time.Since(start).Round(time.Millisecond))
		sleep(ctx, 300*time.Millisecond+time.Duration(in.rng.IntN(1500))*time.Millisecond)
	}
	return ctx.Err()
}

// inject runs one fault to its end and returns the kind it counts as.
func (in *injector) inject(ctx context.Context, kind string) (string, error) {
	engines := len(in.c.Engines())
	i := in.rng.IntN(engines)
	switch kind {
	case FaultEngineKill:
		if err := in.c.KillEngine(i); err != nil {
			return kind, err
		}
		sleep(ctx, in.hold())
		return kind, in.c.RestartEngine(ctx, i)
	case FaultAgentKill:
		if err := in.c.KillAgent(i); err != nil {
			return kind, err
		}
		sleep(ctx, in.hold())
		return kind, in.c.RestartAgent(i)
	case FaultRouterKill:
		rs := in.c.Routers()
		r := rs[in.rng.IntN(len(rs))]
		in.c.KillRouter(r)
		sleep(ctx, in.hold())
		_, err := in.c.RestartRouter(ctx, r)
		return kind, err
	case FaultEngineFreeze:
		if err := in.c.FreezeEngine(i); err != nil {
			return kind, err
		}
		sleep(ctx, in.hold())
		return kind, in.c.ThawEngine(i)
	case FaultNATSStop:
		s := in.rng.IntN(in.c.NATSServers())
		if err := in.c.StopNATS(s); err != nil {
			return kind, err
		}
		sleep(ctx, in.hold())
		return kind, in.c.StartNATS(s)
	case FaultPeerKill:
		return in.peerKill(ctx, i)
	}
	return kind, fmt.Errorf("unknown fault %q", kind)
}

// peerKill makes engine src hold a prompt no one else has, waits until a
// router would hint another engine to pull it from src, sends it there and
// kills src while the pull runs. The answer must still be right: the
// puller recomputes what it could not pull.
func (in *injector) peerKill(ctx context.Context, src int) (string, error) {
	es := in.c.Engines()
	dst := (src + 1 + in.rng.IntN(len(es)-1)) % len(es)
	rt := in.c.Routers()[in.rng.IntN(len(in.c.Routers()))]
	router := rt.URL
	prompt := randomTokens(in.rng, 8*16+5)
	const maxTokens = 4
	want := in.ref.Text(prompt, maxTokens)
	text, cause := complete(ctx, in.hc, router, es[src].ID, prompt, maxTokens, false)
	in.tally.add(cause, cause == "" && text != want, fmt.Sprintf("peer-kill prefill: got %q, want %q", text, want))
	hinted := in.awaitHint(ctx, rt.Admin, es[dst].ID, es[src].ControlEndpoint(0), prompt)
	done := make(chan struct{})
	stream := in.rng.IntN(2) == 0
	go func() {
		defer close(done)
		text, cause := complete(ctx, in.hc, router, es[dst].ID, prompt, maxTokens, stream)
		in.tally.add(cause, cause == "" && text != want, fmt.Sprintf("peer-kill pull: got %q, want %q", text, want))
	}()
	// The pull's simulated setup keeps it open for tens of milliseconds.
	sleep(ctx, time.Duration(in.rng.IntN(20))*time.Millisecond)
	if err := in.c.KillEngine(src); err != nil {
		return FaultPeerKill, err
	}
	<-done
	sleep(ctx, in.hold()/2)
	if err := in.c.RestartEngine(ctx, src); err != nil {
		return FaultPeerKill, err
	}
	if !hinted {
		in.pullMisses++
		return FaultEngineKill, nil
	}
	return FaultPeerKill, nil
}

// awaitHint polls the router's decision (its operator views at admin) for prompt forced to target until
// it hints a pull from source, for at most two seconds.
func (in *injector) awaitHint(ctx context.Context, admin, target, source string, prompt []uint32) bool {
	body := map[string]any{"model": cluster.Model, "prompt": prompt, "max_tokens": 4}
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var v struct {
			Hint json.RawMessage `json:"hint"`
		}
		if _, err := cluster.PostJSON(ctx, admin+"/debug/route", target, body, &v); err == nil &&
			len(v.Hint) > 0 && string(v.Hint) != "null" && json.Valid(v.Hint) && containsString(v.Hint, source) {
			return true
		}
		sleep(ctx, 20*time.Millisecond)
	}
	return false
}

func containsString(raw json.RawMessage, s string) bool {
	b, _ := json.Marshal(s)
	return len(b) > 2 && bytes.Contains(raw, b[1:len(b)-1])
}
