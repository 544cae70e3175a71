package agent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"kvrouter/internal/bus"
	"kvrouter/internal/index"
	"kvrouter/internal/index/indextest"
	"kvrouter/internal/kvencode"
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
	enc    kvencode.Encoder
	topic  string
	srv    *httptest.Server
	sick   atomic.Bool // /health fails
	tr     *indextest.Tree
}

// startEngine starts an engine whose configuration is testdata config with
// its event endpoints pointed at the publisher; buffer is the replay
// buffer (0: the engines' default).
func startEngine(t *testing.T, kind workerconfig.Engine, config string, buffer int) *engine {
	t.Helper()
	return startEngineWith(t, kind, config, buffer, nil)
}

// startEngineWith is startEngine with the configuration patched further.
func startEngineWith(t *testing.T, kind workerconfig.Engine, config string, buffer int, patch func(cfg, extra, events map[string]any)) *engine {
	t.Helper()
	e := &engine{t: t, kind: kind, buffer: buffer}
	e.enc.Format = kvencode.SGLangMap
	if kind == workerconfig.EngineVLLM {
		e.enc.Format = kvencode.VLLMMap
	}
	e.newPublisher("tcp://*:0", "tcp://*:0")
	e.port, e.replay = e.pub.Addr().(*net.TCPAddr).Port, e.pub.ReplayAddr().(*net.TCPAddr).Port
	cfg := engineConfig(t, config, func(cfg, extra, events map[string]any) {
		events["endpoint"] = fmt.Sprintf("tcp://*:%d", e.port)
		events["replay_endpoint"] = fmt.Sprintf("tcp://*:%d", e.replay)
		e.topic, _ = events["topic"].(string)
		if patch != nil {
			patch(cfg, extra, events)
		}
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
	e.tr = indextest.NewTree(16, "A:", "B:A", "C:B", "D:C", "X:", "Y:X")
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
	return treeEvent(e.tr, e.kind == workerconfig.EngineVLLM, kind, runner, names...)
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
func (s *sink) holds(t *testing.T, tr *indextest.Tree, src index.Source) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return tr.DumpSet(t, s.ix, src)
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
