// This file holds the agent's goroutines: a subscriber per DP rank, the engine probe, the core.

package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	"kvrouter/internal/ingest"
	"kvrouter/internal/kvstream"
	"kvrouter/internal/workerconfig"
)

// input is one thing for the core to handle: an item of a DP rank's
// stream, its engine snapshot, a change of the engine's health, or what
// the runner prober found at one of the rank's runners.
type input struct {
	dp     int
	item   kvstream.Item
	snap   *kvstream.Snapshot
	health *bool
	runner *ingest.Runner
}

// relay starts one subscriber per DP rank, the engine probe, and the core
// loop that serialises their inputs. Everything stops when ctx ends; a
// subscriber that cannot bind its endpoint is reported on errs.
func (a *Agent) relay(ctx context.Context, wg *sync.WaitGroup, core *Core, d *workerconfig.Descriptor, errs chan<- error) error {
	in := make(chan input, 1024)
	for _, ev := range d.Events {
		cfg := kvstream.Config{
			Endpoint: ev.Dial, Bind: !ev.PublisherBinds, Topic: ev.Topic,
			// Each DP rank's engine has an endpoint of its own, and its
			// topics (the runner shard topics of a TP > 1 SGLang engine
			// too) share its one seq counter and its one replay buffer.
			OnePublisher:   true,
			ReplayEndpoint: ev.ReplayDial,
			// The engine's buffered history is the agent's initial
			// inventory, and it recovers what ZMQ dropped before the
			// subscription was connected.
			CatchUp: true,
			Backoff: a.cfg.Backoff, Logger: a.log.With("dp_rank", ev.DPRank),
		}
		sub, err := kvstream.NewSubscriber(cfg)
		if err != nil {
			return fmt.Errorf("agent: KV events of DP rank %d (kv_events_config, --advertise-host): %w", ev.DPRank, err)
		}
		a.subs = append(a.subs, sub)
		wg.Add(1)
		go func(dp int, snapshot string) {
			defer wg.Done()
			send := func(x input) {
				select {
				case in <- x:
				case <-ctx.Done():
				}
			}
			// The engine's cut comes first, and the subscriber's catch-up
			// replay after it, so that the replay reaches its barrier: at
			// start, and again whenever the engine comes back (a reconnect
			// or a restart: maybe a new process, whose cut is another).
			var before func(context.Context)
			if snapshot != "" {
				before = func(ctx context.Context) {
					if s := a.fetchSnapshot(ctx, dp, snapshot); s != nil {
						send(input{dp: dp, snap: s})
					}
				}
			}
			err := kvstream.Follow(ctx, sub, before, func(it kvstream.Item) { send(input{dp: dp, item: it}) })
			if err != nil {
				select { // the first failure stops the agent
				case errs <- fmt.Errorf("agent: KV events of DP rank %d at %s (kv_events_config): %w", dp, cfg.Endpoint, err):
				default:
				}
			}
		}(ev.DPRank, ev.SnapshotDial)
		a.log.Info("agent: relaying KV events", "dp_rank", ev.DPRank, "endpoint", cfg.Endpoint, "bind", cfg.Bind,
			"replay", ev.ReplayDial, "snapshot", ev.SnapshotDial, "topic", ev.Topic)
	}
	if a.probesRunners(d) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.probeRunners(ctx, d, in)
		}()
	}
	if a.cfg.EngineGrace > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.probeEngine(ctx, in)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case x := <-in:
				switch {
				case x.health != nil:
					core.SetEngineUp(*x.health)
				case x.runner != nil:
					core.SetRunner(x.dp, *x.runner)
				case x.snap != nil:
					core.Snapshot(x.dp, x.snap)
				default:
					core.Handle(x.dp, x.item)
				}
			}
		}
	}()
	return nil
}

// probeEngine polls the engine's health endpoint. zmq4 has no heartbeats:
// an engine host that vanishes without closing its connections leaves the
// event stream silent, not broken, so only the HTTP front can tell.
func (a *Agent) probeEngine(ctx context.Context, in chan<- input) {
	every := min(max(a.cfg.EngineGrace/4, 100*time.Millisecond), 5*time.Second)
	timeout := min(max(a.cfg.EngineGrace/2, 100*time.Millisecond), 5*time.Second)
	u := a.cfg.EngineURL + PathHealth
	l := liveness{grace: a.cfg.EngineGrace}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, up := l.observe(probe(ctx, a.cfg.HTTPClient, u, timeout), time.Now())
		if !changed {
			continue
		}
		if up {
			a.log.Info("agent: engine healthy again; its sources become ready with its next event batch", "url", u)
		} else {
			a.log.Warn("agent: engine failed health checks for --engine-grace; withdrawing its inventory", "url", u, "grace", a.cfg.EngineGrace)
		}
		select {
		case in <- input{health: &up}:
		case <-ctx.Done():
			return
		}
	}
}
