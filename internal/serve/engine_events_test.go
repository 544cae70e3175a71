package serve

import (
	"encoding/json"
	"net"
	"strconv"
	"testing"
	"time"

	"kvrouter/internal/direct"
	"kvrouter/internal/kvencode"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvstream"
)

// fakeEngine publishes KV events the way an engine does: its own
// sequence numbers from FirstSeq, in one of the engines' wire forms.
type fakeEngine struct {
	t     testing.TB
	pub   *kvstream.Publisher
	enc   kvencode.Encoder
	topic string
}

func newPublisher(t testing.TB, cfg kvstream.PublisherConfig, f kvencode.Format, topic string) *fakeEngine {
	t.Helper()
	cfg.Logger = quiet()
	p, err := kvstream.NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return &fakeEngine{t: t, pub: p, enc: kvencode.Encoder{Format: f}, topic: topic}
}

func (f *fakeEngine) send(rank int, evs ...kvevents.Event) {
	f.t.Helper()
	b, err := f.enc.Encode(kvevents.Batch{TS: float64(time.Now().UnixNano()) / 1e9, DPRank: rank, HasDPRank: true, Events: evs})
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.pub.Publish(f.topic, b); err != nil {
		f.t.Fatal(err)
	}
}

func stored(toks []uint32, tier kvevents.Tier, medium string) kvevents.Event {
	return kvevents.Event{Kind: kvevents.KindStored, BlockHashes: engineHashes(toks, ""), TokenIDs: toks, BlockSize: testBS,
		Tier: tier, Medium: medium}
}

func removed(hashes []uint64) kvevents.Event {
	return kvevents.Event{Kind: kvevents.KindRemoved, BlockHashes: hashes, Tier: kvevents.TierDevice}
}

func port(a net.Addr) string { return strconv.Itoa(a.(*net.TCPAddr).Port) }

// twoPorts finds a port p with p+1 free too, for a DP=2 engine.
func twoPorts(t testing.TB) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+1))
		l.Close()
		if err == nil {
			l2.Close()
			return p
		}
	}
	t.Fatal("no two consecutive free ports")
	return 0
}

// TestEngineEventsConnect: a --worker with events= whose engine binds: the
// router dials DP rank r on the base port + r, follows stores, removals and
// runner-owned blocks, in SGLang's map form and vLLM's array form.
func TestEngineEventsConnect(t *testing.T) {
	for _, f := range []kvencode.Format{kvencode.SGLangMap, kvencode.VLLMArray} {
		t.Run(f.String(), func(t *testing.T) {
			h := newHarness(t)
			e := newEngine(t, testModel)
			base := twoPorts(t)
			ranks := []*fakeEngine{
				newPublisher(t, kvstream.PublisherConfig{Endpoint: "tcp://*:" + strconv.Itoa(base), FirstSeq: 1}, f, ""),
				newPublisher(t, kvstream.PublisherConfig{Endpoint: "tcp://*:" + strconv.Itoa(base+1)}, f, ""),
			}
			events := "tcp://127.0.0.1:" + strconv.Itoa(base)
			engine := ",engine=vllm"
			if f == kvencode.SGLangMap {
				// A vLLM runner's store without extra_keys would not tell
				// its salt: the SGLang form is an SGLang worker's.
				engine = ",engine=sglang"
			}
			g := h.service(func(o *Options) {
				o.Workers = []direct.WorkerSpec{spec(t, e, ",dp=2,events="+events+engine)}
			})
			waitWorkers(t, g, 1)
			toks := prompt(40, 5)
			body := completionBody(toks, "")
			var r routeView
			// ZMQ drops what is published before the subscription is
			// connected: publish until it shows.
			eventually(t, "rank 1's stores", func() bool {
				ranks[1].send(1, stored(toks[:3*testBS], kvevents.TierDevice, ""))
				r = g.route(t, body)
				return r.OverlapBlocks == 3
			})
			if r.Target.DPRank != 1 {
				t.Fatalf("target %+v", r.Target)
			}
			ranks[1].send(1, removed(engineHashes(toks[:3*testBS], "")[1:]))
			eventually(t, "the removal", func() bool { return g.route(t, body).OverlapBlocks == 1 })

			if f == kvencode.SGLangMap {
				// SGLang's KVCR linker reports the runner's blocks as
				// EXTERNAL: the rank's own runner extends its overlap.
				eventually(t, "rank 0's runner-owned blocks", func() bool {
					ev := stored(toks, kvevents.TierExternal, "EXTERNAL")
					ev.Ownership = kvevents.OwnedByRunner
					ranks[0].send(0, ev)
					r = g.route(t, body)
					return r.Target.DPRank == 0 && r.OverlapBlocks == 5
				})
				if c := r.Candidates[0]; c.HostOverlap != 5 || c.DeviceOverlap != 0 {
					t.Fatalf("candidate %+v", c)
				}
			}
			var ws struct {
				Workers []workerView `json:"workers"`
			}
			json.Unmarshal(get(t, g.admin()+"/debug/workers"), &ws)
			if len(ws.Workers) != 1 || ws.Workers[0].Mode != "events" || !ws.Workers[0].Ranks[1].Ready {
				t.Fatalf("workers %+v", ws.Workers)
			}
		})
	}
}

// TestEngineEventsBind: engines that connect to --events-bind (llm-d's
// convention: topic kv@<host>:<port>@<model>, first seq 1) move their
// worker from approximate to events mode.
func TestEngineEventsBind(t *testing.T) {
	h := newHarness(t)
	e := newEngine(t, testModel)
	bind := freeTCP(t)
	g := h.service(func(o *Options) {
		o.Workers = []direct.WorkerSpec{spec(t, e, "")}
		o.EventsBind = bind
	})
	waitWorkers(t, g, 1)
	if w, _ := g.Router.Worker(e.hostPort()); w.Mode.String() != "approximate" {
		t.Fatalf("mode before events: %v", w.Mode)
	}
	eng := newPublisher(t, kvstream.PublisherConfig{Endpoint: bind, FirstSeq: 1}, kvencode.VLLMMap, "kv@"+e.hostPort()+"@"+testModel)
	stranger := newPublisher(t, kvstream.PublisherConfig{Endpoint: bind, FirstSeq: 1}, kvencode.VLLMMap, "kv@10.9.9.9:80@"+testModel)
	toks := prompt(3000, 4)
	body := completionBody(toks, "")
	eventually(t, "events over --events-bind", func() bool {
		eng.send(0, stored(toks, kvevents.TierDevice, ""))
		stranger.send(0, stored(toks, kvevents.TierDevice, ""))
		return g.route(t, body).OverlapBlocks == 4
	})
	if w, _ := g.Router.Worker(e.hostPort()); w.Mode.String() != "events" {
		t.Fatalf("mode after events: %v", w.Mode)
	}
}

// TestWorkerControlIsASource: a --worker with control= is a hint source:
// another worker routed the prompt gets a hint naming that endpoint, for
// the blocks its engine reported.
func TestWorkerControlIsASource(t *testing.T) {
	h := newHarness(t)
	ea, eb := newEngine(t, testModel), newEngine(t, testModel)
	port := twoPorts(t)
	pubB := newPublisher(t, kvstream.PublisherConfig{Endpoint: "tcp://*:" + strconv.Itoa(port)}, kvencode.VLLMMap, "")
	newPublisher(t, kvstream.PublisherConfig{Endpoint: "tcp://*:" + strconv.Itoa(port+1)}, kvencode.VLLMMap, "")
	const control = "tcp://10.0.0.9:25000"
	g := h.service(func(o *Options) {
		o.AllowTargetOverride = true
		o.Workers = []direct.WorkerSpec{
			// a's events make it a target whose prefix is known.
			spec(t, ea, ",id=a,type=aggregated,events=tcp://127.0.0.1:"+strconv.Itoa(port+1)),
			spec(t, eb, ",id=b,type=aggregated,control="+control+",events=tcp://127.0.0.1:"+strconv.Itoa(port)),
		}
	})
	waitWorkers(t, g, 2)
	toks := prompt(70, 6)
	body := completionBody(toks, "")
	var r routeView
	eventually(t, "b's stores hinted to a", func() bool {
		ev := stored(toks, kvevents.TierDevice, "GPU")
		ev.ExtraKeys = true
		pubB.send(0, ev)
		r = g.routeTo(t, body, "a")
		return string(r.Hint) != "null"
	})
	wantHint(t, r, control, engineHashes(toks, ""))
}
