package agent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"kvrouter/internal/bus"
	"kvrouter/internal/discovery"
	"kvrouter/internal/index"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvstream"
	"kvrouter/internal/relay"
	"kvrouter/internal/workerconfig"
)

// waitLimit is a safety net against hangs, not a timing assertion.
const waitLimit = 20 * time.Second

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// engine plays an inference engine: a real ZMQ publisher with replay, an
// HTTP front serving its configuration and /health, and the engine's own
// wire encoding.
type engine struct {
	t      *testing.T
	kind   workerconfig.Engine
	pub    *kvstream.Publisher
	port   int
	replay int
	buffer int
	enc    kvevents.Encoder
	topic  string
	srv    *httptest.Server
	sick   atomic.Bool // /health fails
	tr     *tree
}

// startEngine starts an engine whose configuration is testdata config with
// its event endpoints pointed at the publisher; buffer is the replay
// buffer (0: the engines' default).
func startEngine(t *testing.T, kind workerconfig.Engine, config string, buffer int) *engine {
	t.Helper()
	e := &engine{t: t, kind: kind, buffer: buffer}
	e.enc.Format = kvevents.SGLangMap
	if kind == workerconfig.EngineVLLM {
		e.enc.Format = kvevents.VLLMMap
	}
	e.newPublisher("tcp://*:0", "tcp://*:0")
	e.port, e.replay = e.pub.Addr().(*net.TCPAddr).Port, e.pub.ReplayAddr().(*net.TCPAddr).Port
	cfg := engineConfig(t, config, func(cfg, extra, events map[string]any) {
		events["endpoint"] = fmt.Sprintf("tcp://*:%d", e.port)
		events["replay_endpoint"] = fmt.Sprintf("tcp://*:%d", e.replay)
		e.topic, _ = events["topic"].(string)
	})
	mux := http.NewServeMux()
	mux.HandleFunc(configPath(kind), func(w http.ResponseWriter, _ *http.Request) { w.Write(cfg) })
	mux.HandleFunc(PathHealth, func(w http.ResponseWriter, _ *http.Request) {
		if e.sick.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	t.Cleanup(func() { e.pub.Close() })
	e.tr = newTree(16, "A:", "B:A", "C:B", "D:C", "X:", "Y:X")
	return e
}

func (e *engine) newPublisher(ep, replay string) {
	e.t.Helper()
	p, err := kvstream.NewPublisher(kvstream.PublisherConfig{Endpoint: ep, ReplayEndpoint: replay, BufferSteps: e.buffer, Logger: quiet()})
	if err != nil {
		e.t.Fatal(err)
	}
	e.pub = p
}

// restart replaces the publisher by a new process's: seq from 0, empty
// replay buffer, same endpoints.
func (e *engine) restart() {
	e.pub.Close()
	e.newPublisher(fmt.Sprintf("tcp://*:%d", e.port), fmt.Sprintf("tcp://*:%d", e.replay))
}

func (e *engine) ev(kind string, runner bool, names ...string) kvevents.Event {
	return e.tr.event(e.kind == workerconfig.EngineVLLM, kind, runner, names...)
}

// publish sends one batch on topic ("" for the engine's topic).
func (e *engine) publish(topic string, evs ...kvevents.Event) {
	e.t.Helper()
	if topic == "" {
		topic = e.topic
	}
	payload, err := e.enc.Encode(kvevents.Batch{TS: 1700000000.5, HasDPRank: true, Events: evs})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.pub.Publish(topic, payload); err != nil {
		e.t.Fatal(err)
	}
}

// sink is a router's view of one agent, fed by a relay.Follower.
type sink struct {
	mu    sync.Mutex
	ix    *index.Index
	ready map[index.Source]bool
}

func (s *sink) Reset(src index.Source) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ix.RemoveSource(src)
	s.ready[src] = false
}
func (s *sink) Apply(src index.Source, ops []index.Op) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ix.Apply(src, ops...)
}
func (s *sink) SetReady(src index.Source, r bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ready[src] = r
}
func (s *sink) Gone(src index.Source) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ix.RemoveSource(src)
	delete(s.ready, src)
}

// holds renders what src holds, as tree.dumpSet does.
func (s *sink) holds(t *testing.T, tr *tree, src index.Source) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return tr.dumpSet(t, s.ix, src)
}

func (s *sink) isReady(src index.Source) (ready, known bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ready, known = s.ready[src]
	return ready, known
}

// cluster is one agent beside one engine, with embedded NATS.
type cluster struct {
	t      *testing.T
	eng    *engine
	bus    *bus.Bus
	agent  *Agent
	cancel context.CancelFunc
	done   chan error
	desc   *workerconfig.Descriptor
	worker index.Source
	owner  index.Source
}

func openBus(t *testing.T) *bus.Bus {
	t.Helper()
	b, err := bus.Open(context.Background(), bus.Options{Name: "agent-test", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

func agentConfig(e *engine, b *bus.Bus) Config {
	return Config{
		Engine: e.kind, EngineURL: e.srv.URL, SingleHost: true, DPStart: -1,
		NATSURL: b.URL, NATSTimeout: 10 * time.Second, Lease: 2 * time.Second,
		Backoff: kvstream.Backoff{Min: 5 * time.Millisecond, Max: 50 * time.Millisecond}, Logger: quiet(),
	}
}

func startCluster(t *testing.T, e *engine, b *bus.Bus, tweak func(*Config)) *cluster {
	t.Helper()
	cfg := agentConfig(e, b)
	if tweak != nil {
		tweak(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &cluster{t: t, eng: e, bus: b, agent: a, cancel: cancel, done: make(chan error, 1)}
	go func() { c.done <- a.Run(ctx) }()
	t.Cleanup(func() { c.stop() })
	select {
	case <-a.Registered():
	case err := <-c.done:
		t.Fatalf("agent stopped: %v", err)
	case <-time.After(waitLimit):
		t.Fatal("agent did not register")
	}
	c.desc = a.core.Load().desc
	c.worker = index.WorkerRank(a.cfg.WorkerID, 0)
	if id, ok := c.desc.OwnerIDs[0]; ok {
		c.owner = index.CacheOwner(id)
	}
	return c
}

func (c *cluster) stop() error {
	c.cancel()
	select {
	case err := <-c.done:
		c.done <- err
		return err
	case <-time.After(waitLimit):
		c.t.Fatal("agent did not stop")
		return nil
	}
}

// subscribed waits until the agent's subscription receives the engine's
// batches: ZMQ drops what is published before a subscriber connects.
func (c *cluster) subscribed() {
	c.t.Helper()
	eventually(c.t, "the agent to receive engine batches", func() bool {
		c.eng.publish("")
		return c.agent.Stats().Messages > 0
	})
}

// waitMessages waits until the agent has handled n engine batches.
func (c *cluster) waitMessages(n uint64) {
	c.t.Helper()
	eventually(c.t, fmt.Sprintf("%d engine batches", n), func() bool { return c.agent.Stats().Messages >= n })
}

// follow starts a router-side follower of the agent's stream.
func (c *cluster) follow() *sink {
	c.t.Helper()
	ix, _ := index.New(index.Config{BlockSize: c.desc.KVBlockSize})
	s := &sink{ix: ix, ready: map[index.Source]bool{}}
	f := &relay.Follower{NC: c.bus.Conn, Prefix: relay.Prefix(c.agent.cfg.WorkerID), Sink: s, Log: quiet()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	c.t.Cleanup(func() { cancel(); <-done })
	return s
}

func (c *cluster) expect(s *sink, what string, src index.Source, holds string, ready bool) {
	c.t.Helper()
	eventually(c.t, what, func() bool {
		r, _ := s.isReady(src)
		return s.holds(c.t, c.eng.tr, src) == holds && r == ready
	})
}

func TestAgentRelaysSGLangLinker(t *testing.T) {
	e := startEngine(t, workerconfig.EngineSGLang, "sglang_linker_tp1", 0)
	b := openBus(t)
	c := startCluster(t, e, b, nil)
	c.subscribed()

	// Inventory stored before any router follows: worker-owned GPU pages
	// and the linker's runner-owned EXTERNAL pages of the same hashes.
	n := c.agent.Stats().Messages
	e.publish("", e.ev("store", false, "A", "B"), e.ev("store", true, "A"))
	c.waitMessages(n + 1)
	s := c.follow()
	c.expect(s, "initial inventory of the worker", c.worker, "A@0 B@0", true)
	c.expect(s, "initial inventory of the owner", c.owner, "A@3", true)

	// A batch the agent's subscription misses (another topic shares the
	// publisher's seq) is a gap healed by replay.
	e.publish("not-"+e.topic, e.ev("store", false, "C"))
	e.publish("", e.ev("store", false, "D"))
	c.expect(s, "the replayed batch and the one after it", c.worker, "A@0 B@0 C@0 D@0", true)
	if st := c.agent.Stats(); st.Gaps != 1 || st.Healed != 1 {
		t.Fatalf("gaps %d healed %d, want 1 and 1", st.Gaps, st.Healed)
	}

	e.publish("", e.ev("clear", false))
	c.expect(s, "the worker's clear", c.worker, "", true)
	c.expect(s, "the owner untouched by the worker's clear", c.owner, "A@3", true)

	// A store at another block size is rejected with its whole batch, and
	// the rank is rebuilt because the batch may have carried removals.
	bad := e.ev("store", false, "X")
	bad.BlockSize, bad.TokenIDs, bad.BlockHashes = 8, bad.TokenIDs[:8], bad.BlockHashes[:1]
	e.publish("", e.ev("store", false, "Y"), bad)
	e.publish("", e.ev("store", false, "X"))
	c.expect(s, "the owner reset after the rejected batch", c.owner, "", true)
	c.expect(s, "the store after the rejected batch", c.worker, "X@0", true)
	if st := c.agent.Stats(); st.Rejected[RejectBlockSize] != 1 || st.Resets[ResetRejected] != 1 {
		t.Fatalf("stats %+v", st)
	}

	// Stopping withdraws the sources from routers at once.
	if err := c.stop(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the sources gone", func() bool {
		_, w := s.isReady(c.worker)
		_, o := s.isReady(c.owner)
		return !w && !o
	})
}

func TestAgentVLLMOwnershipKVCR(t *testing.T) {
	e := startEngine(t, workerconfig.EngineVLLM, "vllm_kvcr", 0)
	b := openBus(t)
	c := startCluster(t, e, b, nil)
	c.subscribed()
	s := c.follow()
	e.publish("", e.ev("store", true, "X", "Y"), e.ev("store", false, "X"))
	c.expect(s, "runner-owned blocks under the cache owner", c.owner, "X@1 Y@1", true)
	c.expect(s, "worker-owned blocks under the worker rank", c.worker, "X@0", true)
	// ownership "kvcr" on a clear: the runner's blocks only.
	e.publish("", e.ev("clear", true))
	c.expect(s, "the runner's clear", c.owner, "", true)
	c.expect(s, "the worker untouched by the runner's clear", c.worker, "X@0", true)
}

func TestAgentUnhealableGapAndRestart(t *testing.T) {
	// A replay buffer of one batch cannot give back older ones.
	e := startEngine(t, workerconfig.EngineSGLang, "sglang_linker_tp1", 1)
	b := openBus(t)
	c := startCluster(t, e, b, nil)
	c.subscribed()
	s := c.follow()
	e.publish("", e.ev("store", false, "A", "B"))
	c.expect(s, "A B", c.worker, "A@0 B@0", true)

	e.publish("not-"+e.topic, e.ev("remove", false, "B"))
	e.publish("not-"+e.topic, e.ev("store", false, "X"))
	e.publish("", e.ev("store", false, "C"), e.ev("store", false, "Y"))
	// B's removal is lost: the rank is reset and rebuilt; C (under B, from
	// before the reset) is skipped, Y stored under lost X is skipped too.
	eventually(t, "the unrecoverable gap", func() bool { return c.agent.Stats().Resets[ResetUnrecoverable] == 1 })
	e.publish("", e.ev("store", false, "A"))
	c.expect(s, "the rebuilt inventory", c.worker, "A@0", true)

	// A new engine process: seq from 0, empty cache.
	e.restart()
	before := c.agent.Stats().Messages
	eventually(t, "the restarted engine's batches", func() bool {
		e.publish("")
		return c.agent.Stats().Messages > before
	})
	c.expect(s, "the reset after the restart", c.worker, "", true)
	e.publish("", e.ev("store", false, "X", "Y"))
	c.expect(s, "the new process's inventory", c.worker, "X@0 Y@0", true)
	if st := c.agent.Stats(); st.Resets[ResetRestart]+st.Resets[ResetReconnected] == 0 {
		t.Fatalf("no restart reset: %+v", st.Resets)
	}
}

func TestAgentTP2Aggregation(t *testing.T) {
	e := startEngine(t, workerconfig.EngineSGLang, "sglang_linker_tp2", 0)
	b := openBus(t)
	c := startCluster(t, e, b, nil)
	if c.desc.TPRanksPerDPRank != 2 || c.desc.InventoryAggregation != workerconfig.AggregateAllTPRanks {
		t.Fatalf("descriptor: %d TP ranks, aggregation %q", c.desc.TPRanksPerDPRank, c.desc.InventoryAggregation)
	}
	c.subscribed()
	s := c.follow()
	shard := func(tp int) string { return kvevents.RunnerShardTopic(e.topic, tp) }
	e.publish(shard(1), e.ev("store", true, "A", "B"))
	e.publish(shard(0), e.ev("store", true, "A"))
	e.publish("", e.ev("store", false, "A"))
	c.expect(s, "the worker's own block", c.worker, "A@0", true)
	c.expect(s, "A held by both shards", c.owner, "A@3", true)
	e.publish(shard(0), e.ev("store", true, "B"))
	c.expect(s, "B held by both shards", c.owner, "A@3 B@3", true)
	e.publish(shard(1), e.ev("remove", true, "A"))
	c.expect(s, "A evicted by one shard", c.owner, "B@3", true)
}

func TestAgentRegistration(t *testing.T) {
	b := openBus(t)
	reg, err := discovery.OpenNATS(context.Background(), b.JS, "", 2*time.Second, quiet())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch, err := reg.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := func() discovery.Change {
		t.Helper()
		for {
			select {
			case ch := <-watch:
				if ch.Op != discovery.OpSynced {
					return ch
				}
			case <-time.After(waitLimit):
				t.Fatal("no registration change")
			}
		}
	}

	e := startEngine(t, workerconfig.EngineSGLang, "sglang_linker_tp1", 0)
	c := startCluster(t, e, b, nil)
	// Endpoints first, worker type second, the capability flag last: the
	// bucket keeps one revision per key, so a watcher may miss a stage, but
	// every state it sees is a prefix of that order, never a capability
	// flag without the endpoints behind it.
	want := []string{workerconfig.KeySourceControlEndpoints, workerconfig.KeyWorkerType, workerconfig.KeyHintCapability}
	var got discovery.Worker
	for seen := 0; seen < len(want); {
		ch := next()
		var keys []string
		for _, f := range ch.Worker.RuntimeData {
			keys = append(keys, f.Key)
		}
		if ch.Op != discovery.OpPut || len(keys) < seen || len(keys) > len(want) || strings.Join(keys, ",") != strings.Join(want[:len(keys)], ",") {
			t.Fatalf("after %d keys: op %v keys %v, want a longer prefix of %v", seen, ch.Op, keys, want)
		}
		seen, got = len(keys), ch.Worker
	}
	host := strings.TrimPrefix(e.srv.URL, "http://")
	if got.ID != host || got.URL != e.srv.URL || got.Model != "Qwen/Qwen3-32B" || got.Engine != "sglang" ||
		got.BlockSize != 16 || got.DPStart != 0 || got.DPSize != 1 || got.Events != relay.Prefix(host) || got.Refusal != "" ||
		got.Owners["0"] != c.desc.OwnerIDs[0] || got.Owners["0"] == "" {
		t.Fatalf("registration %+v", got)
	}
	if err := c.stop(); err != nil {
		t.Fatal(err)
	}
	for {
		if ch := next(); ch.Op == discovery.OpDelete {
			if ch.ID != host {
				t.Fatalf("deleted %q, want %q", ch.ID, host)
			}
			break
		}
	}

	// A refused topology is a plain routing target: no hint keys, no
	// owners, the refusal said; its worker-owned inventory is relayed.
	e2 := startEngine(t, workerconfig.EngineSGLang, "sglang_pp2", 0)
	c2 := startCluster(t, e2, b, func(cfg *Config) { cfg.WorkerID = "refused" })
	var plain discovery.Worker
	for plain.ID != "refused" {
		if ch := next(); ch.Op == discovery.OpPut {
			plain = ch.Worker
		}
	}
	if len(plain.RuntimeData) != 0 || len(plain.Owners) != 0 || !strings.Contains(plain.Refusal, "pipeline") || plain.Events != relay.Prefix("refused") {
		t.Fatalf("refused registration %+v", plain)
	}
	c2.subscribed()
	s := c2.follow()
	e2.publish("", e2.ev("store", false, "A"), e2.ev("store", true, "A"))
	c2.expect(s, "the refused worker's own inventory", c2.worker, "A@0", true)
	if st := c2.agent.Stats(); st.Dropped[DropNoOwner] != 1 {
		t.Fatalf("stats %+v", st.Dropped)
	}
}

func TestAgentEngineDown(t *testing.T) {
	e := startEngine(t, workerconfig.EngineSGLang, "sglang_linker_tp1", 0)
	b := openBus(t)
	c := startCluster(t, e, b, func(cfg *Config) { cfg.EngineGrace = 20 * time.Millisecond })
	c.subscribed()
	s := c.follow()
	e.publish("", e.ev("store", false, "A"))
	c.expect(s, "A", c.worker, "A@0", true)
	e.sick.Store(true)
	c.expect(s, "the inventory withdrawn", c.worker, "", false)
	if st := c.agent.Stats(); st.Resets[ResetEngineDown] != 1 {
		t.Fatalf("resets %+v", st.Resets)
	}
	e.sick.Store(false)
	eventually(t, "the engine back", func() bool {
		e.publish("", e.ev("store", false, "X"))
		r, _ := s.isReady(c.worker)
		return r
	})
	c.expect(s, "the inventory after the engine's return", c.worker, "X@0", true)
}
