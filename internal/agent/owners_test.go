package agent

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"kvrouter/internal/discovery"
	"kvrouter/internal/ingest"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvstream"
	"kvrouter/internal/relay"
	"kvrouter/internal/runner/runnertest"
	"kvrouter/internal/workerconfig"
)

// A cache owner's inventory is its runner's: an engine restart keeps it
// (the owner is a hint source again once the runner answers with its
// epoch), a runner silent for less than --owner-ttl keeps it too, and a
// runner restart or one silent past the TTL drops it.
func TestAgentOwnerOutlivesEngine(t *testing.T) {
	port := runnertest.FreePort(t)
	rn := runnertest.Serve(t, nil, port)
	e := startEngineWith(t, workerconfig.EngineSGLang, "sglang_linker_tp1", 0, func(_, extra, _ map[string]any) {
		extra["control_port"] = port
	})
	b := openBus(t)
	c := startCluster(t, e, b, func(cfg *Config) { cfg.RunnerProbe, cfg.OwnerTTL = 20*time.Millisecond, 500*time.Millisecond })
	c.subscribed()
	s := c.follow()
	e.publish("", e.ev("store", false, "A", "B"), e.ev("store", true, "A", "B"))
	c.expect(s, "the worker's blocks", c.worker, "A@0 B@0", true)
	c.expect(s, "the owner's blocks", c.owner, "A@3 B@3", true)

	// A new engine process: seq from 0, empty GPU cache; the runner lives.
	e.restart()
	before := c.agent.Stats().Messages
	eventually(t, "the restarted engine's batches", func() bool {
		e.publish("")
		return c.agent.Stats().Messages > before
	})
	c.expect(s, "the worker rebuilt", c.worker, "", true)
	c.expect(s, "the owner kept", c.owner, "A@3 B@3", true)
	e.publish("", e.ev("store", true, "C"))
	c.expect(s, "the owner's new block under its kept ones", c.owner, "A@3 B@3 C@3", true)

	// The runner stops answering, then answers again with its epoch
	// within the TTL: not a hint source meanwhile, its blocks kept.
	rn.Stop()
	c.expect(s, "the owner withdrawn while its runner is silent", c.owner, "", false)
	rn = runnertest.Serve(t, rn.R, port)
	c.expect(s, "the owner back with its blocks", c.owner, "A@3 B@3 C@3", true)

	// A new runner process: the old one's blocks are gone with it.
	rn.Stop()
	rn = runnertest.Serve(t, nil, port)
	c.expect(s, "the owner of the new runner", c.owner, "", true)
	e.publish("", e.ev("store", true, "X"))
	c.expect(s, "the new runner's block", c.owner, "X@3", true)

	// Silent past the TTL: dropped, whoever answers next.
	rn.Stop()
	eventually(t, "the owner expired", func() bool { return c.agent.Stats().Counts[ingest.ResetRunnerExpired] == 1 })
	runnertest.Serve(t, rn.R, port)
	c.expect(s, "the owner after its expiry", c.owner, "", true)
	st := c.agent.Stats()
	if st.Counts[ingest.ResetRunnerRestart] != 1 || st.Counts[ingest.ResetRestart]+st.Counts[ingest.ResetReconnected] == 0 {
		t.Fatalf("resets %+v", st.Counts)
	}
}

// On a clean stop the relay's gone messages reach NATS before the
// registration's deletion: a router reading both on one connection gets
// them in that order.
func TestAgentStopOrder(t *testing.T) {
	e := startEngine(t, workerconfig.EngineSGLang, "sglang_linker_tp1", 0)
	b := openBus(t)
	c := startCluster(t, e, b, nil)
	c.subscribed()
	// Both on one connection, into one channel: nats.go hands each
	// message to its channel from the connection's reader, in order.
	ch := make(chan *nats.Msg, 4096)
	for _, subj := range []string{relay.Prefix(c.agent.cfg.WorkerID) + ".>", "$KV." + discovery.DefaultBucket + ".>"} {
		sub, err := b.Conn.ChanSubscribe(subj, ch)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}
	if err := b.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := c.stop(); err != nil {
		t.Fatal(err)
	}
	var order []string
	for deleted := false; !deleted; {
		select {
		case m := <-ch:
			if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
				order, deleted = append(order, "deregistered"), true
				continue
			}
			if rm, err := relay.Decode(m.Data); err == nil && rm.Kind == relay.KindGone {
				order = append(order, "gone "+rm.Source.String())
			}
		case <-time.After(waitLimit):
			t.Fatalf("no deregistration; saw %q", order)
		}
	}
	if want := []string{"gone " + c.worker.String(), "deregistered"}; fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("order %q, want %q", order, want)
	}
}

// An idle engine's history is the agent's initial inventory without any
// live batch: the catch-up starts at the subscription.
func TestAgentCatchesUpOnIdleEngine(t *testing.T) {
	e := startEngine(t, workerconfig.EngineSGLang, "sglang_linker_tp1", 0)
	e.publish("", e.ev("store", false, "A", "B"), e.ev("store", true, "A"))
	e.publish("", e.ev("remove", false, "B"))
	b := openBus(t)
	c := startCluster(t, e, b, nil)
	s := c.follow()
	c.expect(s, "the idle engine's history", c.worker, "A@0", true)
	c.expect(s, "the owner's history", c.owner, "A@3", true)
	if n := c.agent.Stats().Messages; n != 2 {
		t.Fatalf("%d batches handled, want the 2 of the history", n)
	}
}

// An engine offering snapshot-v1: its cut, with the history before it,
// is the initial inventory, and live batches follow the cut's resume seq
// under its epoch.
func TestAgentSnapshotCatchUp(t *testing.T) {
	snapPort := runnertest.FreePort(t)
	e := startEngineWith(t, workerconfig.EngineSGLang, "sglang_linker_tp1", 0, func(_, _, events map[string]any) {
		events["snapshot_endpoint"] = fmt.Sprintf("tcp://*:%d", snapPort)
	})
	e.pub.Close()
	p, err := kvstream.NewPublisher(kvstream.PublisherConfig{
		Endpoint: fmt.Sprintf("tcp://*:%d", e.port), ReplayEndpoint: fmt.Sprintf("tcp://*:%d", e.replay), Logger: quiet(),
		Snapshot: kvstream.SnapshotServerConfig{Endpoint: fmt.Sprintf("tcp://*:%d", snapPort), Topic: e.topic, Epoch: "ep1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	e.pub = p
	live := e.topic + kvstream.EpochSuffix("ep1")
	publish := func(evs ...kvevents.Event) {
		t.Helper()
		payload, err := e.enc.Encode(kvevents.Batch{TS: 1700000000.5, HasDPRank: true, Events: evs})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.PublishEvents(live, payload, evs); err != nil {
			t.Fatal(err)
		}
	}
	publish(e.ev("store", false, "A", "B"), e.ev("store", true, "A"))
	publish(e.ev("remove", false, "B"))

	b := openBus(t)
	c := startCluster(t, e, b, nil)
	s := c.follow()
	c.expect(s, "the cut", c.worker, "A@0", true)
	c.expect(s, "the owner's part of the cut", c.owner, "A@3", true)
	publish(e.ev("store", false, "X"))
	c.expect(s, "a live batch after the cut", c.worker, "A@0 X@0", true)
	st := c.agent.Stats()
	if st.Counts[ingest.ResetEpoch] != 0 || st.Counts[ingest.ResetUnrecoverable] != 0 {
		t.Fatalf("counts %+v", st.Counts)
	}
}

// An engine offering snapshot-v1 that restarts and stays idle: the agent
// fetches the new process's cut again and catches up on its history from
// seq 0, as at start. The old process's blocks are gone, the new one's
// are the inventory, and live batches of the new epoch follow the cut.
func TestAgentSnapshotAfterEngineRestart(t *testing.T) {
	snapPort := runnertest.FreePort(t)
	e := startEngineWith(t, workerconfig.EngineSGLang, "sglang_linker_tp1", 0, func(_, _, events map[string]any) {
		events["snapshot_endpoint"] = fmt.Sprintf("tcp://*:%d", snapPort)
	})
	var live string
	start := func(epoch string) *kvstream.Publisher {
		t.Helper()
		e.pub.Close()
		p, err := kvstream.NewPublisher(kvstream.PublisherConfig{
			Endpoint: fmt.Sprintf("tcp://*:%d", e.port), ReplayEndpoint: fmt.Sprintf("tcp://*:%d", e.replay), Logger: quiet(),
			Snapshot: kvstream.SnapshotServerConfig{Endpoint: fmt.Sprintf("tcp://*:%d", snapPort), Topic: e.topic, Epoch: epoch},
		})
		if err != nil {
			t.Fatal(err)
		}
		e.pub, live = p, e.topic+kvstream.EpochSuffix(epoch)
		return p
	}
	publish := func(evs ...kvevents.Event) {
		t.Helper()
		payload, err := e.enc.Encode(kvevents.Batch{TS: 1700000000.5, HasDPRank: true, Events: evs})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.pub.PublishEvents(live, payload, evs); err != nil {
			t.Fatal(err)
		}
	}
	start("ep1")
	publish(e.ev("store", false, "A", "B"), e.ev("store", true, "A"))
	publish(e.ev("remove", false, "B"))
	c := startCluster(t, e, openBus(t), nil)
	s := c.follow()
	c.expect(s, "the first process's inventory", c.worker, "A@0", true)
	c.expect(s, "the first process's owner", c.owner, "A@3", true)

	// A new process, idle once it holds X: no live batch reveals it.
	p2 := start("ep2")
	publish(e.ev("store", false, "X"), e.ev("store", true, "X"))
	c.expect(s, "the new process's inventory", c.worker, "X@0", true)
	c.expect(s, "the new process's owner", c.owner, "X@3", true)
	if st := p2.Stats(); st.Published < 2 {
		t.Fatalf("the new process stamped %d batches: its cut was not asked for (no barrier)", st.Published)
	}
	publish(e.ev("store", false, "Y"))
	c.expect(s, "a live batch of the new epoch", c.worker, "X@0 Y@0", true)
	if st := c.agent.Stats(); st.Counts[ingest.ResetEpoch] != 0 || st.Counts[ingest.ResetUnrecoverable] != 0 {
		t.Fatalf("counts %+v", st.Counts)
	}
}
