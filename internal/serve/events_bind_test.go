package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"kvrouter/internal/direct"
	"kvrouter/internal/kvencode"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvstream"
	"kvrouter/internal/zmtp"
)

// logBuffer collects a service's log lines from concurrent writers.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), sub)
}

// TestEventsBindFlood is issue 28's event-port flood: 20,000 topics that
// name no worker, sent within 3 s, made 20,000 warnings and kept state for
// each topic forever. The warnings are rate-limited, and the worker's own
// events, sent on the same connection after the flood, still apply.
func TestEventsBindFlood(t *testing.T) {
	h := newHarness(t)
	e := newEngine(t, testModel)
	bind := freeTCP(t)
	var logs logBuffer
	g := h.service(func(o *Options) {
		o.Workers = []direct.WorkerSpec{spec(t, e, "")}
		o.EventsBind = bind
		o.Log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	waitWorkers(t, g, 1)
	eng := newPublisher(t, kvstream.PublisherConfig{Endpoint: bind, FirstSeq: 1}, kvencode.VLLMMap, "kv@"+e.hostPort()+"@"+testModel)
	toks := prompt(3000, 4)
	eventually(t, "events over --events-bind", func() bool {
		eng.send(0, stored(toks, kvevents.TierDevice, ""))
		return g.route(t, completionBody(toks, "")).OverlapBlocks == 4
	})
	const flood = 20000
	start := time.Now()
	for i := range flood {
		if _, err := eng.pub.Publish(fmt.Sprintf("kv@10.%d.%d.%d:80@m", i>>16, i>>8&255, i&255), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Logf("the flood took %v", d)
	}
	// One connection keeps its order: once this batch applies, the
	// router has read the whole flood.
	after := prompt(7000, 3)
	eng.send(0, stored(after, kvevents.TierDevice, ""))
	eventually(t, "the worker's events after the flood", func() bool {
		return g.route(t, completionBody(after, "")).OverlapBlocks == 3
	})
	// The service's clock stands still: one window's burst.
	if n := logs.count("topic names no --worker"); n == 0 || n > 5 {
		t.Fatalf("%d warnings about %d unknown topics, want 1 to 5", n, flood)
	}
}

// TestEventsBindReplay: a worker whose engine connects to --events-bind
// and serves replay (replay= without events=) has its gaps healed from
// that endpoint, framed [topic, seq, payload] as some publishers do,
// rather than its inventory cleared.
func TestEventsBindReplay(t *testing.T) {
	h := newHarness(t)
	e := newEngine(t, testModel)
	bind := freeTCP(t)
	topic := "kv@" + e.hostPort() + "@" + testModel
	enc := kvencode.Encoder{Format: kvencode.VLLMMap}
	payload := func(evs ...kvevents.Event) []byte {
		b, err := enc.Encode(kvevents.Batch{TS: float64(time.Now().UnixNano()) / 1e9, Events: evs})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b, c := prompt(1000, 4), prompt(2000, 3), prompt(3000, 2)

	// The replay endpoint holds one batch: seq lost, storing b.
	var mu sync.Mutex
	lost := uint64(0)
	router, err := zmtp.New(zmtp.Router, zmtp.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := router.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); router.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			req, err := router.Recv(ctx)
			if err != nil {
				return
			}
			start, err := kvstream.ParseReplayRequest(req.Frames[1:])
			mu.Lock()
			seq := lost
			mu.Unlock()
			if err == nil && start <= seq {
				router.Send(ctx, append([][]byte{req.Frames[0]}, kvstream.EncodeMessage(topic, seq, payload(stored(b, kvevents.TierDevice, "")))...))
			}
			router.Send(ctx, append([][]byte{req.Frames[0]}, kvstream.EncodeMessage(topic, 1<<64-1, nil)...))
		}
	})
	g := h.service(func(o *Options) {
		o.Workers = []direct.WorkerSpec{spec(t, e, ",replay=tcp://"+router.Addr().String())}
		o.EventsBind = bind
	})
	waitWorkers(t, g, 1)

	pub, err := zmtp.New(zmtp.Pub, zmtp.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	if err := pub.Connect(bind); err != nil {
		t.Fatal(err)
	}
	seq := uint64(0)
	eventually(t, "events over --events-bind", func() bool {
		seq++
		pub.Send(ctx, kvstream.EncodeMessage(topic, seq, payload(stored(a, kvevents.TierDevice, ""))))
		return g.route(t, completionBody(a, "")).OverlapBlocks == 4
	})
	mu.Lock()
	lost = seq + 1
	mu.Unlock()
	pub.Send(ctx, kvstream.EncodeMessage(topic, seq+2, payload(stored(c, kvevents.TierDevice, ""))))
	eventually(t, "the batch after the gap", func() bool { return g.route(t, completionBody(c, "")).OverlapBlocks == 2 })
	if got := g.route(t, completionBody(b, "")).OverlapBlocks; got != 3 {
		t.Fatalf("the replayed batch's blocks: overlap %d, want 3", got)
	}
	if got := g.route(t, completionBody(a, "")).OverlapBlocks; got != 4 {
		t.Fatalf("the blocks from before the gap: overlap %d, want 4 (inventory cleared?)", got)
	}
}

// TestDebugInventory: GET /debug/inventory lists a worker rank's blocks by
// the engine hashes its events named.
func TestDebugInventory(t *testing.T) {
	h := newHarness(t)
	e := newEngine(t, testModel)
	bind := freeTCP(t)
	g := h.service(func(o *Options) {
		o.Workers = []direct.WorkerSpec{spec(t, e, "")}
		o.EventsBind = bind
	})
	waitWorkers(t, g, 1)
	eng := newPublisher(t, kvstream.PublisherConfig{Endpoint: bind, FirstSeq: 1}, kvencode.VLLMMap, "kv@"+e.hostPort()+"@"+testModel)
	toks := prompt(3000, 4)
	eventually(t, "events over --events-bind", func() bool {
		eng.send(0, stored(toks, kvevents.TierDevice, ""))
		return g.route(t, completionBody(toks, "")).OverlapBlocks == 4
	})
	var inv struct {
		Sources []struct {
			Worker string              `json:"worker"`
			DPRank *int                `json:"dp_rank"`
			Blocks map[string][]uint64 `json:"blocks"`
		} `json:"sources"`
	}
	if err := json.Unmarshal(get(t, g.admin()+"/debug/inventory"), &inv); err != nil {
		t.Fatal(err)
	}
	want := slices.Sorted(slices.Values(engineHashes(toks, "")))
	for _, s := range inv.Sources {
		if s.Worker == e.hostPort() && s.DPRank != nil && *s.DPRank == 0 {
			if !slices.Equal(s.Blocks["device"], want) {
				t.Fatalf("device blocks %v, want %v", s.Blocks["device"], want)
			}
			return
		}
	}
	t.Fatalf("no rank 0 of %s in %+v", e.hostPort(), inv)
}
