package agent

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"kvrouter/internal/index/indextest"
	"kvrouter/internal/ingest"
	"kvrouter/internal/kvencode"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvstream"
	"kvrouter/internal/runner/runnertest"
	"kvrouter/internal/workerconfig"
)

// startBindMode starts an agent for an SGLang engine whose kv_events_config
// endpoint names a specific address: the agent binds it and the engine's
// publisher (firstSeq: where its counter starts) dials in.
func startBindMode(t *testing.T, config string, firstSeq uint64) (*engine, *cluster) {
	t.Helper()
	port, replay := runnertest.FreePort(t), runnertest.FreePort(t)
	e := &engine{t: t, kind: workerconfig.EngineSGLang, port: port, replay: replay, tr: indextest.NewTree(16, "A:", "B:A", "C:B", "D:C", "X:", "Y:X")}
	e.enc.Format = kvencode.SGLangMap
	cfg := engineConfig(t, config, func(cfg, extra, events map[string]any) {
		events["endpoint"] = fmt.Sprintf("tcp://127.0.0.1:%d", port)
		events["replay_endpoint"] = fmt.Sprintf("tcp://*:%d", replay)
		e.topic, _ = events["topic"].(string)
	})
	mux := http.NewServeMux()
	mux.HandleFunc(PathSGLangServerInfo, func(w http.ResponseWriter, _ *http.Request) { w.Write(cfg) })
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	c := startCluster(t, e, openBus(t), nil)
	if c.desc.Events[0].PublisherBinds {
		t.Fatal("descriptor: the publisher binds")
	}
	e.startDialing(firstSeq)
	t.Cleanup(func() { e.pub.Close() })
	return e, c
}

// startDialing replaces the engine's publisher by a new process's that
// dials the agent, with an empty replay buffer and its counter at firstSeq.
func (e *engine) startDialing(firstSeq uint64) {
	e.t.Helper()
	if e.pub != nil {
		e.pub.Close()
	}
	p, err := kvstream.NewPublisher(kvstream.PublisherConfig{
		Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", e.port), ReplayEndpoint: fmt.Sprintf("tcp://*:%d", e.replay),
		FirstSeq: firstSeq, Backoff: kvstream.Backoff{Min: 5 * time.Millisecond, Max: 50 * time.Millisecond}, Logger: quiet(),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.pub = p
}

// A TP > 1 SGLang engine that dials the agent publishes its runner shards'
// inventory on shard topics from its one PUB, with one seq counter: they
// are one stream, with no gaps between the topics, and the shard batches
// keep their topics so that each is its shard's.
func TestAgentBindModeShardTopicsShareSeq(t *testing.T) {
	e, c := startBindMode(t, "sglang_linker_tp2", 0)
	c.subscribed()
	s := c.follow()
	base := c.agent.Stats()
	shard := func(tp int) string { return kvevents.RunnerShardTopic(e.topic, tp) }
	e.publish("", e.ev("store", false, "A"))
	e.publish(shard(0), e.ev("store", true, "A"))
	e.publish(shard(1), e.ev("store", true, "A"))
	e.publish("", e.ev("remove", false, "A"))
	e.publish(shard(1), e.ev("store", true, "B"))
	e.publish("", e.ev("store", false, "X"))
	c.waitMessages(base.Messages + 6)
	c.expect(s, "the engine's eviction of A", c.worker, "X@0", true)
	c.expect(s, "A held by both shards, B by one", c.owner, "A@3", true)
	if st := c.agent.Stats(); st.Gaps != base.Gaps {
		t.Fatalf("%d gaps in one seq counter's batches", st.Gaps-base.Gaps)
	}
	e.publish(shard(0), e.ev("store", true, "B"))
	c.expect(s, "B held by both shards", c.owner, "A@3 B@3", true)
}

// An engine that dials the agent and restarts comes back on a new
// connection. Its counter may already be past the last seq the agent saw
// (it published before its connection was up): its batches must not be
// applied on the old process's inventory.
func TestAgentBindModeEngineRestart(t *testing.T) {
	e, c := startBindMode(t, "sglang_linker_tp1", 0)
	c.subscribed()
	s := c.follow()
	payload, err := e.enc.Encode(kvevents.Batch{TS: 1700000000.5, HasDPRank: true, Events: []kvevents.Event{e.ev("store", false, "A", "B")}})
	if err != nil {
		t.Fatal(err)
	}
	last, err := e.pub.Publish(e.topic, payload)
	if err != nil {
		t.Fatal(err)
	}
	c.expect(s, "the first process's inventory, up to its last batch", c.worker, "A@0 B@0", true)

	e.startDialing(last + 1)
	before := c.agent.Stats().Messages
	eventually(t, "the new process's batches", func() bool {
		e.publish("")
		return c.agent.Stats().Messages > before
	})
	c.expect(s, "no block of the old process", c.worker, "", true)
	e.publish("", e.ev("store", false, "X"))
	c.expect(s, "the new process's inventory", c.worker, "X@0", true)
	if st := c.agent.Stats(); st.Counts[ingest.ResetReconnected] != 1 {
		t.Fatalf("resets %v, want one after the reconnect", st.Counts)
	}
}
