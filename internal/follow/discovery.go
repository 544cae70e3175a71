// This file holds the discovery watch and the relay followers it starts per agent.

package follow

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"kvrouter/internal/discovery"
	"kvrouter/internal/hints"
	"kvrouter/internal/relay"
	"kvrouter/internal/router"
)

// Discovery keeps the router's table in step with the registry and runs one
// relay follower per worker that has a state agent.
type Discovery struct {
	Registry discovery.Registry
	Router   *router.Router
	NC       *nats.Conn // the event plane
	Metrics  *Metrics
	Log      *slog.Logger
	Now      func() time.Time
	// PeerAllow widens the runner endpoints a registration may name
	// beyond its worker's own host.
	PeerAllow PeerAllow

	wg        sync.WaitGroup
	followers map[string]*follower
	refused   map[string]string // id → last logged reason, to log once
}

var _ relay.Sink = (*router.Sink)(nil)

type follower struct {
	reg    discovery.Worker // the registration it follows
	cancel context.CancelFunc
	done   chan struct{}
}

// Run watches the registry until ctx ends, re-watching after a lost watch.
// While the watch is lost the router sends no hint naming an
// agent-registered source: a worker may have left unseen.
func (d *Discovery) Run(ctx context.Context) {
	d.followers = map[string]*follower{}
	d.refused = map[string]string{}
	defer func() {
		for id := range d.followers {
			d.stop(id)
		}
		d.wg.Wait()
	}()
	backoff := 100 * time.Millisecond
	for {
		d.Router.SetDiscoveryLive(false)
		ch, err := d.Registry.Watch(ctx)
		if err == nil {
			if d.watch(ctx, ch) {
				backoff = 100 * time.Millisecond
			}
		} else {
			d.Log.Warn("discovery: watch failed; retrying", "err", err, "in", backoff)
		}
		if ctx.Err() != nil {
			return
		}
		d.Router.SetDiscoveryLive(false)
		d.Metrics.discoveryLost.Inc()
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// watch consumes one watch; it reports whether it got in step.
func (d *Discovery) watch(ctx context.Context, ch <-chan discovery.Change) bool {
	seen := map[string]bool{}
	synced := false
	for c := range ch {
		switch c.Op {
		case discovery.OpPut:
			if !synced {
				seen[c.ID] = true
			}
			d.put(c.Worker)
		case discovery.OpDelete:
			d.remove(c.ID)
		case discovery.OpSynced:
			// Workers that left while the watch was down are not in the
			// replay: drop them now.
			for _, w := range d.Router.WorkersOfOrigin(router.OriginDiscovery) {
				if !seen[w] {
					d.remove(w)
				}
			}
			synced = true
			d.Router.SetDiscoveryLive(true)
			d.Log.Debug("discovery: in step")
		}
	}
	if ctx.Err() == nil {
		d.Log.Warn("discovery: watch lost; no hints from agent-registered sources until it is back")
	}
	return synced
}

func (d *Discovery) put(dw discovery.Worker) {
	w, err := workerFromRegistration(dw)
	if err != nil {
		if d.refused[dw.ID] != err.Error() {
			d.refused[dw.ID] = err.Error()
			d.Log.Warn("discovery: ignoring registration", "worker", dw.ID, "err", err)
		}
		return
	}
	if w.Refusal == "" && len(w.Capability.Endpoints) > 0 {
		if err := d.PeerAllow.check(dw.URL, w.Capability.Endpoints); err != nil {
			// Its endpoints are never named in a hint: engines would pull
			// from wherever the registration points.
			w.Capability, w.Refusal = hints.Capability{}, err.Error()
			if d.refused[dw.ID] != w.Refusal {
				d.refused[dw.ID] = w.Refusal
				d.Metrics.peerRefused.Inc()
				d.Log.Warn("discovery: registration names a runner endpoint away from its worker's host; the worker routes without hints "+
					"(add the endpoint's network to --peer-allow if it is right)", "worker", w.ID, "err", err)
			}
		}
	}
	if w.Refusal != "" && d.refused[dw.ID] != w.Refusal {
		d.refused[dw.ID] = w.Refusal
		d.Log.Info("discovery: worker routes without hints", "worker", w.ID, "reason", w.Refusal)
	}
	if w.Refusal == "" {
		delete(d.refused, dw.ID) // a refusal coming back is news again
	}
	if dw.Events == "" {
		// No agent relays its events: guess from routing decisions.
		w.Mode = router.ModeApproximate
	}
	f := d.followers[w.ID]
	restart := f == nil || !sameStream(f.reg, dw)
	if f != nil && restart {
		d.stop(w.ID)
	}
	if err := d.Router.Upsert(w, d.Now()); err != nil {
		d.Log.Warn("discovery: cannot add worker", "worker", w.ID, "err", err)
		return
	}
	if f != nil && !restart {
		f.reg = dw
		return
	}
	d.Log.Info("discovery: worker joined", "worker", w.ID, "model", w.Model, "engine", w.Engine, "url", w.URL,
		"dp_start", w.DPStart, "dp_size", w.DPSize, "block_size", w.BlockSize, "mode", w.Mode,
		"hint_type", w.Capability.Type, "events", dw.Events)
	if dw.Events == "" {
		d.followers[w.ID] = &follower{reg: dw}
		return
	}
	sink, err := d.Router.Sink(w.ID)
	if err != nil {
		d.Log.Warn("discovery: no sink", "worker", w.ID, "err", err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	nf := &follower{reg: dw, cancel: cancel, done: make(chan struct{})}
	d.followers[w.ID] = nf
	rf := &relay.Follower{NC: d.NC, Prefix: dw.Events, Sink: sink, Log: d.Log.With("worker", w.ID),
		Resynced: func(reason string) { d.Metrics.resyncs.WithLabelValues(reason).Inc() },
		Silent: func(silent bool) {
			if silent {
				d.Metrics.silentAgents.Inc()
				d.Metrics.silences.Inc()
			} else {
				d.Metrics.silentAgents.Dec()
			}
		}}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer close(nf.done)
		if err := rf.Run(ctx); err != nil && ctx.Err() == nil {
			d.Log.Warn("discovery: relay follower stopped", "worker", w.ID, "err", err)
		}
		if rf.IsSilent() {
			d.Metrics.silentAgents.Dec() // a follower that stopped counts no more
		}
	}()
}

// sameStream reports whether a re-registration leaves the follower's view
// valid: same stream, same index, same ranks.
func sameStream(a, b discovery.Worker) bool {
	return a.Events == b.Events && a.Model == b.Model && a.BlockSize == b.BlockSize &&
		a.DPStart == b.DPStart && a.DPSize == b.DPSize
}

func (d *Discovery) remove(id string) {
	d.stop(id)
	delete(d.refused, id)
	if w, ok := d.Router.Worker(id); ok && w.Origin == router.OriginDiscovery {
		d.Router.Remove(id, d.Now())
		d.Log.Info("discovery: worker left", "worker", id)
	}
}

func (d *Discovery) stop(id string) {
	f := d.followers[id]
	if f == nil {
		return
	}
	delete(d.followers, id)
	if f.cancel != nil {
		f.cancel()
		<-f.done
	}
}
