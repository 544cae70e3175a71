package agent

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"kvrouter/internal/discovery"
	"kvrouter/internal/ingest"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/relay"
	"kvrouter/internal/workerconfig"
)

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
	// publisher's seq) is a gap healed by replay. (The first batch the
	// agent saw may already have opened one: its catch-up of the history
	// published before the subscription was connected.)
	base := c.agent.Stats()
	e.publish("not-"+e.topic, e.ev("store", false, "C"))
	e.publish("", e.ev("store", false, "D"))
	c.expect(s, "the replayed batch and the one after it", c.worker, "A@0 B@0 C@0 D@0", true)
	if st := c.agent.Stats(); st.Gaps-base.Gaps != 1 || st.Healed-base.Healed != 1 {
		t.Fatalf("gaps %d healed %d, want 1 and 1", st.Gaps-base.Gaps, st.Healed-base.Healed)
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
	if st := c.agent.Stats(); st.Counts[ingest.RejectBlockSize] != 1 || st.Counts[ingest.ResetRejected] != 1 {
		t.Fatalf("stats %+v", st)
	}

	// Stopping withdraws the worker rank from routers at once; the ready
	// owner is left to them (its runner still serves: they keep it
	// detached for their TTL once the registration goes).
	e.publish("", e.ev("store", true, "X"))
	c.expect(s, "the owner's X", c.owner, "X@3", true)
	if err := c.stop(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the worker rank gone", func() bool {
		_, w := s.isReady(c.worker)
		return !w
	})
	c.expect(s, "the owner left as it was", c.owner, "X@3", true)
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
	eventually(t, "the unrecoverable gap", func() bool { return c.agent.Stats().Counts[ingest.ResetUnrecoverable] == 1 })
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
	if st := c.agent.Stats(); st.Counts[ingest.ResetRestart]+st.Counts[ingest.ResetReconnected] == 0 {
		t.Fatalf("no restart reset: %+v", st.Counts)
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
	if st := c2.agent.Stats(); st.Counts[ingest.DropNoOwner] != 1 {
		t.Fatalf("stats %+v", st.Counts)
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
	if st := c.agent.Stats(); st.Counts[ingest.ResetEngineDown] != 1 {
		t.Fatalf("resets %+v", st.Counts)
	}
	e.sick.Store(false)
	eventually(t, "the engine back", func() bool {
		e.publish("", e.ev("store", false, "X"))
		r, _ := s.isReady(c.worker)
		return r
	})
	c.expect(s, "the inventory after the engine's return", c.worker, "X@0", true)
}

// An engine given a specific address connects to it: the agent binds
// there, and still heals a gap through the engine's replay endpoint.
func TestAgentBindMode(t *testing.T) {
	e, c := startBindMode(t, "sglang_linker_tp1", 0)
	c.subscribed()
	s := c.follow()
	base := c.agent.Stats()
	e.publish("", e.ev("store", false, "A"))
	e.publish("not-"+e.topic, e.ev("store", false, "B"))
	e.publish("", e.ev("store", false, "C"))
	c.expect(s, "the chain with the replayed batch", c.worker, "A@0 B@0 C@0", true)
	// B reaches the agent through the replay only; under load the first
	// batch may be dropped before the subscription reaches the engine,
	// which the catch-up at connection or a second gap heals as well.
	if st := c.agent.Stats(); st.Healed-base.Healed < 1 {
		t.Fatalf("healed %d, want at least 1", st.Healed-base.Healed)
	}
}

// An event endpoint the agent must bind but cannot stops it with an error
// naming the endpoint, after deregistering.
func TestAgentCannotBindEvents(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ep := "tcp://" + l.Addr().String()
	cfg := engineConfig(t, "sglang_linker_tp1", func(cfg, extra, events map[string]any) { events["endpoint"] = ep })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(cfg) }))
	defer srv.Close()
	b := openBus(t)
	a, err := New(agentConfig(&engine{kind: workerconfig.EngineSGLang, srv: srv}, b))
	if err != nil {
		t.Fatal(err)
	}
	err = a.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), ep) || !strings.Contains(err.Error(), "kv_events_config") {
		t.Fatalf("err %v, want one naming %s and kv_events_config", err, ep)
	}
}

// TestAgentCatchesUpOnHistory: an agent that attaches to an engine that
// already published (or whose first batches ZMQ dropped before the
// subscription was connected) replays the engine's buffer from seq 0, so
// that history is its initial inventory.
func TestAgentCatchesUpOnHistory(t *testing.T) {
	e := startEngine(t, workerconfig.EngineSGLang, "sglang_linker_tp1", 0)
	// Nobody listens yet: these batches exist only in the replay buffer.
	e.publish("", e.ev("store", false, "A", "B"), e.ev("store", true, "A"))
	e.publish("", e.ev("store", false, "C"))
	b := openBus(t)
	c := startCluster(t, e, b, nil)
	c.subscribed()
	s := c.follow()
	c.expect(s, "the history before the subscription", c.worker, "A@0 B@0 C@0", true)
	c.expect(s, "the owner's history", c.owner, "A@3", true)
}
