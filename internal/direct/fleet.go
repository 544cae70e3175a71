// This file holds the --worker fleet: engines brought up and their events followed.

package direct

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	kvingest "kvrouter/internal/ingest"
	"kvrouter/internal/kvstream"
	"kvrouter/internal/router"
	"kvrouter/internal/runnerprobe"
)

// Fleet brings up the --worker engines: it learns each one's model when
// not given, registers it, and follows its KV events, dialing an engine
// that binds (events=) or taking what engines send to --events-bind.
type Fleet struct {
	Specs      []WorkerSpec
	EventsBind string
	Router     *router.Router
	Client     *http.Client
	Metrics    *Metrics
	Log        *slog.Logger
	Now        func() time.Time
	// RunnerProbe is how the runners of the workers given control= are
	// probed (--runner-probe, --owner-ttl; Log is the fleet's): a rank's
	// cache owner keeps its inventory across an engine restart or
	// reconnect while its runners answer with the epoch they had, is not a
	// hint source while one does not answer, and is dropped when one
	// restarts or stays silent for the TTL. Interval 0 probes none, and an
	// owner is reset with its engine.
	RunnerProbe runnerprobe.Config

	mu      sync.Mutex
	byHost  map[string]*flagWorker // URL host:port → worker, for bind-mode topics
	unknown unknownTopics
}

type flagWorker struct {
	spec  WorkerSpec
	model string  // "" until the worker answered /v1/models
	in    *ingest // set once its events are followed (events=) or flow in on --events-bind
}

// Run brings the fleet up and follows it until ctx ends.
func (f *Fleet) Run(ctx context.Context) {
	f.byHost = map[string]*flagWorker{}
	var wg sync.WaitGroup
	for _, spec := range f.Specs {
		fw := &flagWorker{spec: spec}
		f.byHost[spec.hostPort()] = fw
		wg.Go(func() { f.bringUp(ctx, fw) })
		if f.probes(spec) {
			wg.Go(func() { f.probeRunners(ctx, fw) })
		}
	}
	if f.EventsBind != "" {
		wg.Go(func() { f.bind(ctx) })
	}
	wg.Wait()
}

func (f *Fleet) bringUp(ctx context.Context, fw *flagWorker) {
	spec := fw.spec
	model := spec.model
	var loras []string
	if model != "" {
		// Its LoRA adapters, if it says.
		if listed, adapters, err := askModel(ctx, f.Client, spec.url); err == nil && listed == model {
			loras = adapters
		}
	}
	for delay := 250 * time.Millisecond; model == ""; delay = min(2*delay, 5*time.Second) {
		var err error
		if model, loras, err = askModel(ctx, f.Client, spec.url); err == nil {
			break
		}
		f.Log.Warn("worker: waiting for its /v1/models to name the model (or give model= in --worker)",
			"worker", spec.ID, "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
	w := spec.worker(model, spec.events != "")
	w.LoRAs = loras
	if err := f.Router.Upsert(w, f.Now()); err != nil {
		f.Log.Error("worker: cannot add", "worker", spec.ID, "err", err)
		return
	}
	f.Log.Info("worker: added", "worker", spec.ID, "model", model, "lora_adapters", loras, "mode", modeOf(spec.events != ""))
	f.mu.Lock()
	fw.model = model
	f.mu.Unlock()
	if spec.events == "" {
		return
	}
	sink, err := f.Router.Sink(spec.ID)
	if err != nil {
		f.Log.Error("worker: no sink", "worker", spec.ID, "err", err)
		return
	}
	in := newEngineIngest(spec, sink, f.Metrics, f.Log, f.Now, f.probes(spec))
	f.mu.Lock()
	fw.in = in
	f.mu.Unlock()
	var wg sync.WaitGroup
	for rank := range spec.dp {
		wg.Go(func() { f.follow(ctx, spec, in, rank) })
	}
	wg.Wait()
}

// probes reports whether spec's runners are probed: probing is on, and
// the worker's runners are hint sources (control=) whose inventory its
// events may report.
func (f *Fleet) probes(spec WorkerSpec) bool {
	return f.RunnerProbe.Interval > 0 && len(spec.control) > 0 && (spec.events != "" || f.EventsBind != "")
}

// probeRunners pings every TP rank's runner of each of fw's DP ranks, every
// --runner-probe, and reports each result to the worker's ingest core once
// its events are followed; a report before then has nothing to stand for,
// and the prober repeats an answering runner's epoch at every ping.
func (f *Fleet) probeRunners(ctx context.Context, fw *flagWorker) {
	cfg := f.RunnerProbe
	cfg.Log = f.Log.With("worker", fw.spec.ID)
	runnerprobe.Run(ctx, cfg, fw.spec.runnerTargets(), func(tg runnerprobe.Target, rep kvingest.Runner) {
		f.mu.Lock()
		in := fw.in
		f.mu.Unlock()
		if in != nil {
			in.step(tg.DP, rep)
		}
	})
}

func modeOf(events bool) string {
	if events {
		return router.ModeEvents.String()
	}
	return router.ModeApproximate.String()
}

// follow dials rank's publisher, whose port is the base port offset by
// the rank, as the engines do.
func (f *Fleet) follow(ctx context.Context, spec WorkerSpec, in *ingest, rank int) {
	ep, err := kvstream.EndpointForRank(spec.events, rank)
	if err != nil {
		f.Log.Error("worker: events endpoint", "worker", in.id, "events", spec.events, "err", err)
		return
	}
	replay := ""
	if spec.replay != "" {
		if replay, err = kvstream.EndpointForRank(spec.replay, rank); err != nil {
			f.Log.Error("worker: replay endpoint", "worker", in.id, "replay", spec.replay, "err", err)
			return
		}
	}
	var before func(context.Context)
	if spec.snapshot != "" {
		snap, err := kvstream.EndpointForRank(spec.snapshot, rank)
		if err != nil {
			f.Log.Error("worker: snapshot endpoint", "worker", in.id, "snapshot", spec.snapshot, "err", err)
			return
		}
		// The cut first, so that the catch-up replay reaches its barrier:
		// at start, and again whenever the engine comes back (a reconnect
		// or a restart: maybe a new process, whose cut is another).
		before = func(ctx context.Context) {
			if s, err := kvstream.FetchSnapshot(ctx, snap, kvstream.SnapshotClientConfig{Logger: f.Log}); err != nil {
				if ctx.Err() == nil {
					f.Log.Warn("worker: engine snapshot unavailable; catching up from the replay buffer alone", "worker", in.id, "dp_rank", rank, "err", err)
				}
			} else {
				in.snapshot(rank, s)
			}
		}
	}
	// An idle engine's history is the router's initial inventory: the
	// catch-up replays it at the first connection.
	sub, err := kvstream.NewSubscriber(kvstream.Config{Endpoint: ep, ReplayEndpoint: replay, CatchUp: replay != "", Logger: f.Log})
	if err != nil {
		f.Log.Error("worker: events", "worker", in.id, "err", err)
		return
	}
	f.Metrics.streams.add(ep, sub)
	if err := kvstream.Follow(ctx, sub, before, func(it kvstream.Item) { in.handle(it, rank) }); err != nil {
		f.Log.Error("events: subscriber stopped", "worker", in.id, "err", err)
	}
}

// bind takes the events engines send to --events-bind (the llm-d
// convention): the topic kv@<host>:<port>@<model> names the worker by its
// URL's host:port. A worker first seen here leaves approximate mode. The
// subscriber keeps no state for a topic that names no worker, and gaps
// are healed from the worker's replay= endpoint.
func (f *Fleet) bind(ctx context.Context) {
	// Engines are known by topic only once they send: each catches up on
	// its history at its first batch, from its worker's replay=.
	sub, err := kvstream.NewSubscriber(kvstream.Config{Endpoint: f.EventsBind, Bind: true, CatchUp: true, Logger: f.Log,
		Accept: f.accept, ReplayFor: f.replayFor, Now: f.Now})
	if err != nil {
		f.Log.Error("--events-bind", "endpoint", f.EventsBind, "err", err)
		return
	}
	f.Log.Info("events: listening for engines", "endpoint", f.EventsBind)
	f.Metrics.streams.add(f.EventsBind, sub)
	err = kvstream.Follow(ctx, sub, nil, func(it kvstream.Item) {
		key := itemKey(it)
		in := f.bound(key)
		if in == nil {
			f.Metrics.eventDropped.WithLabelValues("unknown_worker").Inc()
			return
		}
		in.handle(it, -1)
	})
	if err != nil {
		f.Log.Error("events: subscriber stopped", "endpoint", f.EventsBind, "err", err)
	}
}

// accept says whether the subscriber on --events-bind should follow a
// topic (its publisher key): one that names a worker whose model is known
// and whose events are not dialed. Other topics' messages are dropped and
// counted, with a warning for a topic's first within a rate limit.
func (f *Fleet) accept(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	fw := f.byHost[topicHost(key)]
	if fw != nil && fw.model != "" && fw.spec.events == "" {
		return true
	}
	f.Metrics.eventDropped.WithLabelValues("unknown_worker").Inc()
	if fw != nil && fw.spec.events != "" {
		// Followed by dialing already: the same events twice would
		// only confuse the sequence tracking.
		return false
	}
	if warn, unlogged := f.unknown.note(key, f.Now()); warn {
		f.Log.Warn("events: topic names no --worker (yet); want kv@<host>:<port>@<model> matching a worker's url",
			"topic", key, "other_topics_unlogged", unlogged)
	}
	return false
}

// replayFor is the replay endpoint of the --events-bind engine a publisher
// key names: its worker's replay=, when the worker has one DP rank (in
// bind mode the ranks of one engine share its topic, and so its key).
func (f *Fleet) replayFor(key string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	fw := f.byHost[topicHost(key)]
	if fw == nil || fw.spec.events != "" || fw.spec.dp != 1 {
		return ""
	}
	return fw.spec.replay
}

// topicHost is the host:port a kv@<host>:<port>@<model> topic names, ""
// if it names none.
func topicHost(topic string) string {
	parts := strings.SplitN(topic, "@", 3)
	if len(parts) != 3 {
		return ""
	}
	return parts[1]
}

// bound returns the ingest of the worker a bind-mode topic names, switching
// the worker to events mode at its first batch.
func (f *Fleet) bound(topic string) *ingest {
	host := topicHost(topic)
	f.mu.Lock()
	defer f.mu.Unlock()
	fw := f.byHost[host]
	if fw == nil || fw.model == "" {
		return nil
	}
	if fw.spec.events != "" {
		// Followed by dialing already: the same events twice would
		// only confuse the sequence tracking.
		return nil
	}
	if fw.in != nil {
		return fw.in
	}
	if err := f.Router.Upsert(fw.spec.worker(fw.model, true), f.Now()); err != nil {
		f.Log.Error("worker: cannot switch to events mode", "worker", fw.spec.ID, "err", err)
		return nil
	}
	sink, err := f.Router.Sink(fw.spec.ID)
	if err != nil {
		return nil
	}
	f.Log.Info("worker: events arrive on --events-bind; leaving approximate mode", "worker", fw.spec.ID, "topic", topic)
	fw.in = newEngineIngest(fw.spec, sink, f.Metrics, f.Log, f.Now, f.probes(fw.spec))
	return fw.in
}

func itemKey(it kvstream.Item) string {
	switch v := it.(type) {
	case kvstream.Message:
		return v.Key
	case kvstream.Gap:
		return v.Key
	case kvstream.Unrecoverable:
		return v.Key
	case kvstream.Restart:
		return v.Key
	}
	return ""
}

// askModel reads the first model a worker's /v1/models lists, and the
// LoRA adapters it lists with that model as their parent (vLLM's
// --lora-modules).
func askModel(ctx context.Context, c *http.Client, base string) (string, []string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models", nil)
	if err != nil {
		return "", nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return "", nil, fmt.Errorf("/v1/models: %s", resp.Status)
	}
	var list struct {
		Data []struct {
			ID     string `json:"id"`
			Parent string `json:"parent"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return "", nil, fmt.Errorf("/v1/models: %w", err)
	}
	if len(list.Data) == 0 || list.Data[0].ID == "" {
		return "", nil, fmt.Errorf("/v1/models lists no model")
	}
	model := list.Data[0].ID
	var loras []string
	for _, m := range list.Data[1:] {
		if m.Parent == model && m.ID != "" {
			loras = append(loras, m.ID)
		}
	}
	return model, loras, nil
}
