package direct

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"kvrouter/internal/cost"
	"kvrouter/internal/hints"
	"kvrouter/internal/kvencode"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvstream"
	"kvrouter/internal/router"
)

// runFleet runs a fleet of one --worker spec (and --events-bind) into a
// router of its own until the test ends.
func runFleet(t *testing.T, spec, bind string) *router.Router {
	t.Helper()
	return runFleetWith(t, spec, bind, nil)
}

// runFleetWith is runFleet with the fleet adjusted by tweak.
func runFleetWith(t *testing.T, spec, bind string, tweak func(*Fleet)) *router.Router {
	t.Helper()
	r, err := router.New(router.Config{Weights: cost.DefaultWeights(),
		Policy: func(int) (hints.Policy, error) { return hints.MinBlocks(1), nil }})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := ParseWorkerSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	f := &Fleet{Specs: []WorkerSpec{ws}, EventsBind: bind, Router: r, Client: http.DefaultClient,
		Metrics: NewMetrics(prometheus.NewRegistry()), Log: quiet(), Now: time.Now}
	if tweak != nil {
		tweak(f)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

func overlap(t *testing.T, r *router.Router, toks []uint32) int {
	t.Helper()
	d, err := r.Decide(router.Request{Model: "m", Tokens: toks})
	if err != nil {
		return -1 // not registered yet
	}
	return d.Overlap
}

func waitOverlap(t *testing.T, r *router.Router, toks []uint32, want int, poke func()) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); overlap(t, r, toks) != want; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("overlap %d, want %d", overlap(t, r, toks), want)
		}
		if poke != nil {
			poke()
		}
	}
}

func tcpOf(a net.Addr) string { return "tcp://127.0.0.1:" + strconv.Itoa(a.(*net.TCPAddr).Port) }

func freeEndpoint(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return tcpOf(l.Addr())
}

// An idle --worker engine's history is the router's initial inventory: its
// snapshot-v1 cut and replay buffer, without any live batch.
func TestFleetCatchesUpOnIdleEngine(t *testing.T) {
	p, err := kvstream.NewPublisher(kvstream.PublisherConfig{Endpoint: "tcp://*:0", ReplayEndpoint: "tcp://*:0", Logger: quiet(),
		Snapshot: kvstream.SnapshotServerConfig{Endpoint: "tcp://*:0", Topic: "kv", Epoch: "e1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	enc := kvencode.Encoder{Format: kvencode.SGLangMap}
	publish := func(evs ...kvevents.Event) {
		b, err := enc.Encode(kvevents.Batch{TS: 1, Events: evs})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.PublishEvents("kv"+kvstream.EpochSuffix("e1"), b, evs); err != nil {
			t.Fatal(err)
		}
	}
	a, x := prompt(1, 3), prompt(100, 2)
	publish(stored(a, kvevents.TierDevice, "GPU"))
	publish(stored(x, kvevents.TierDevice, "GPU"), removed(engineHashes(x, "")[1:]))

	r := runFleet(t, fmt.Sprintf("url=http://w:1,id=w,model=m,engine=sglang,block_size=%d,events=%s,replay=%s,snapshot=%s",
		testBS, tcpOf(p.Addr()), tcpOf(p.ReplayAddr()), tcpOf(p.SnapshotAddr())), "")
	waitOverlap(t, r, a, 3, nil)
	waitOverlap(t, r, x, 1, nil)
	// Live batches follow the cut.
	y := prompt(200, 2)
	publish(stored(y, kvevents.TierDevice, "GPU"))
	waitOverlap(t, r, y, 2, nil)
}

// An engine that sends to --events-bind is known by its topic once it
// sends: its first batch opens the catch-up of its history from its
// worker's replay=.
func TestFleetEventsBindCatchesUp(t *testing.T) {
	bind := freeEndpoint(t)
	p, err := kvstream.NewPublisher(kvstream.PublisherConfig{Endpoint: bind, ReplayEndpoint: "tcp://*:0", Logger: quiet(),
		Backoff: kvstream.Backoff{Min: 5 * time.Millisecond, Max: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	topic := "kv@w:1@m"
	enc := kvencode.Encoder{Format: kvencode.VLLMMap}
	publish := func(evs ...kvevents.Event) {
		b, err := enc.Encode(kvevents.Batch{TS: 1, Events: evs})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Publish(topic, b); err != nil {
			t.Fatal(err)
		}
	}
	// Published before anyone listens: in the replay buffer only.
	a := prompt(1, 3)
	publish(stored(a, kvevents.TierDevice, "GPU"))

	r := runFleet(t, fmt.Sprintf("url=http://w:1,id=w,model=m,block_size=%d,replay=%s", testBS, tcpOf(p.ReplayAddr())), bind)
	waitOverlap(t, r, a, 3, func() { publish() })
}

// A --worker engine offering snapshot-v1 that restarts and stays idle: the
// router fetches the new process's cut again and catches up on its
// history from seq 0, as at start. The old process's blocks are gone and
// the new one's are the inventory.
func TestFleetSnapshotAfterEngineRestart(t *testing.T) {
	events, replay, snapshot := freeEndpoint(t), freeEndpoint(t), freeEndpoint(t)
	var p *kvstream.Publisher
	start := func(epoch string) {
		t.Helper()
		if p != nil {
			p.Close()
		}
		var err error
		p, err = kvstream.NewPublisher(kvstream.PublisherConfig{Endpoint: bindAll(events), ReplayEndpoint: bindAll(replay), Logger: quiet(),
			Snapshot: kvstream.SnapshotServerConfig{Endpoint: bindAll(snapshot), Topic: "kv", Epoch: epoch}})
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { p.Close() })
	enc := kvencode.Encoder{Format: kvencode.SGLangMap}
	publish := func(epoch string, evs ...kvevents.Event) {
		t.Helper()
		b, err := enc.Encode(kvevents.Batch{TS: 1, Events: evs})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.PublishEvents("kv"+kvstream.EpochSuffix(epoch), b, evs); err != nil {
			t.Fatal(err)
		}
	}
	start("e1")
	a, x := prompt(1, 3), prompt(100, 2)
	publish("e1", stored(a, kvevents.TierDevice, "GPU"))
	r := runFleet(t, fmt.Sprintf("url=http://w:1,id=w,model=m,engine=sglang,block_size=%d,events=%s,replay=%s,snapshot=%s",
		testBS, events, replay, snapshot), "")
	waitOverlap(t, r, a, 3, nil)

	// A new process, idle once it holds x: no live batch reveals it.
	start("e2")
	publish("e2", stored(x, kvevents.TierDevice, "GPU"))
	waitOverlap(t, r, x, 2, nil)
	waitOverlap(t, r, a, 0, nil)
	if st := p.Stats(); st.Published < 2 {
		t.Fatalf("the new process stamped %d batches: its cut was not asked for (no barrier)", st.Published)
	}
}

// bindAll is the wildcard endpoint a publisher binds to be dialed at ep.
func bindAll(ep string) string { return "tcp://*:" + ep[strings.LastIndexByte(ep, ':')+1:] }
