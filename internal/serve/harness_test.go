package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"kvrouter/internal/bus"
	"kvrouter/internal/discovery"
	"kvrouter/internal/frontdoor"
	"kvrouter/internal/hints"
	"kvrouter/internal/index"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvhash"
	"kvrouter/internal/relay"
)

// Header names the tests pin: what clients and engines rely on.
const (
	headerTarget     = "x-kvrouter-target"
	headerWorker     = "x-kvrouter-worker"
	headerDPRank     = "x-kvrouter-dp-rank"
	headerVLLMDPRank = "X-data-parallel-rank"
	headerRequestID  = "X-Request-Id"
)

// routeView is the part of POST /debug/route the tests read.
type routeView struct {
	Target struct {
		WorkerID string `json:"worker_id"`
		DPRank   int    `json:"dp_rank"`
	} `json:"target"`
	Candidates []struct {
		WorkerID       string `json:"worker_id"`
		OverlapBlocks  int    `json:"overlap_blocks"`
		DeviceOverlap  int    `json:"device_overlap"`
		HostOverlap    int    `json:"host_overlap"`
		ActiveRequests int    `json:"active_requests"`
	} `json:"candidates"`
	Hint         json.RawMessage `json:"hint"`
	HintDecision struct {
		Reason string `json:"reason"`
		Source *struct {
			Owner string `json:"owner"`
		} `json:"source"`
		Reach int `json:"reach"`
	} `json:"hint_decision"`
	Tokens        int `json:"tokens"`
	Blocks        int `json:"blocks"`
	OverlapBlocks int `json:"overlap_blocks"`
}

// workerView is the part of a GET /debug/workers worker the tests read.
type workerView struct {
	Mode       string `json:"mode"`
	Origin     string `json:"origin"`
	Engine     string `json:"engine"`
	BlockSize  int    `json:"block_size"`
	Type       string `json:"type"`
	CanConsume bool   `json:"can_consume_hints"`
	Placement  string `json:"placement"`
	Ranks      []struct {
		DPRank int            `json:"dp_rank"`
		Ready  bool           `json:"ready"`
		Blocks map[string]int `json:"blocks"`
	} `json:"ranks"`
}

// ownerView is the part of a GET /debug/workers cache owner the tests
// read.
type ownerView struct {
	ID       string `json:"id"`
	Detached bool   `json:"detached"`
}

// waitLimit is a safety net against hangs, not a timing assertion.
const waitLimit = 10 * time.Second

const (
	testModel = "demo"
	testBS    = 4
)

func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(waitLimit); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// clock is a settable time source.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Unix(1_700_000_000, 0)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// received is one request an engine got.
type received struct {
	Path    string
	Body    json.RawMessage
	Headers http.Header
}

// engine answers like an OpenAI engine and echoes what it received, so
// tests can see what the router sent: the hint, the DP rank, the body.
type engine struct {
	t     testing.TB
	srv   *httptest.Server
	mux   *http.ServeMux
	model string
	// delay is how long an answer takes: a non-streamed one before it
	// starts, a stream between its first event and the rest.
	delay time.Duration

	mu          sync.Mutex
	maxModelLen int // reported on /v1/models; 0 reports none
	got         []received
	metrics     string
	cached      int // usage.prompt_tokens_details.cached_tokens to report
	peer        int // usage.kvrouter.peer_restored_tokens to report
	hold        chan struct{}
	canceled    chan struct{}
}

func newEngine(t testing.TB, model string) *engine {
	e := &engine{t: t, model: model, canceled: make(chan struct{}, 16)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		e.mu.Lock()
		n := e.maxModelLen
		e.mu.Unlock()
		fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model","max_model_len":%d}]}`, e.model, n)
	})
	mux.HandleFunc("GET /health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("POST /v1/completions", e.complete)
	mux.HandleFunc("POST /v1/chat/completions", e.complete)
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		e.mu.Lock()
		defer e.mu.Unlock()
		io.WriteString(w, e.metrics)
	})
	e.mux = mux
	e.srv = httptest.NewServer(mux)
	t.Cleanup(func() { e.srv.Close() })
	return e
}

// kill stops the engine as kill -9 would: its port refuses connections and
// the connections it had break.
func (e *engine) kill() {
	e.srv.Listener.Close()
	e.srv.CloseClientConnections()
}

// restart serves again on the address the engine had.
func (e *engine) restart() {
	e.t.Helper()
	ln, err := net.Listen("tcp", e.hostPort())
	if err != nil {
		e.t.Fatal(err)
	}
	e.srv.Close()
	e.srv = &httptest.Server{Listener: ln, Config: &http.Server{Handler: e.mux}}
	e.srv.Start()
}

// wait sleeps for the engine's delay, or until the request is canceled.
func (e *engine) wait(r *http.Request) bool {
	e.mu.Lock()
	d := e.delay
	e.mu.Unlock()
	select {
	case <-time.After(d):
		return true
	case <-r.Context().Done():
		return false
	}
}

func (e *engine) url() string { return e.srv.URL }

func (e *engine) hostPort() string { return strings.TrimPrefix(e.srv.URL, "http://") }

func (e *engine) requests() []received {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]received(nil), e.got...)
}

func (e *engine) last() received {
	e.t.Helper()
	got := e.requests()
	if len(got) == 0 {
		e.t.Fatal("engine received nothing")
	}
	return got[len(got)-1]
}

func (e *engine) complete(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	e.mu.Lock()
	e.got = append(e.got, received{Path: r.URL.Path, Body: body, Headers: r.Header.Clone()})
	hold, cached, peer := e.hold, e.cached, e.peer
	e.mu.Unlock()
	var req struct {
		Stream        bool `json:"stream"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	json.Unmarshal(body, &req)
	usage := fmt.Sprintf(`{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":%d},"kvrouter":{"peer_restored_tokens":%d}}`, cached, peer)
	if !req.Stream {
		if !e.wait(r) {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"ok"}],"usage":%s,"echo":{"worker":%q}}`,
			usage, e.hostPort())
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\"a\"}]}\n\n")
	fl.Flush()
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
			e.canceled <- struct{}{}
			return
		}
	}
	if !e.wait(r) {
		return
	}
	fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\"b\"}]}\n\n")
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":%s}\n\n", usage)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// harness is one test's world: a NATS bus, an in-memory registry on a
// settable clock, and router services started on them.
type harness struct {
	t     *testing.T
	bus   *bus.Bus
	reg   *discovery.Memory
	clock *clock
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	b, err := bus.Open(context.Background(), bus.Options{Name: "serve-test", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	c := newClock()
	return &harness{t: t, bus: b, reg: discovery.NewMemory(10*time.Second, c.Now), clock: c}
}

// service starts a replica; edit adjusts its options.
func (h *harness) service(edit func(*Options)) *Service {
	h.t.Helper()
	o := Defaults()
	o.Listen, o.AdminListen, o.Bus, o.Registry, o.Now, o.Log = "127.0.0.1:0", "127.0.0.1:0", h.bus, h.reg, h.clock.Now, quiet()
	o.HintPolicy = policyMinBlocks
	o.Tokenizer = frontdoor.TokenizerDemo // the simulated engines'
	o.Tick, o.SizeEvery, o.PeerEvery = 5*time.Millisecond, time.Hour, 20*time.Millisecond
	// On the frozen clock a probe schedule would not move anyway; tests
	// of health set their own.
	o.HealthInterval = 0
	if edit != nil {
		edit(&o)
	}
	g, err := Start(context.Background(), o)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { g.Close() })
	return g
}

func (g *Service) url() string { return "http://" + g.Addr }

// admin is the base URL of the operator views.
func (g *Service) admin() string { return "http://" + g.AdminAddr }

// post sends body to path and returns the status, headers and body.
func post(t testing.TB, url, path string, body string, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func get(t testing.TB, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	return b
}

func (g *Service) route(t testing.TB, body string) routeView {
	t.Helper()
	status, _, b := post(t, g.admin(), "/debug/route", body)
	if status != http.StatusOK {
		t.Fatalf("/debug/route: %d %s", status, b)
	}
	var out routeView
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return out
}

// routeTo asks for the decision with the target forced (the router must
// allow it), to look at hints for a given target.
func (g *Service) routeTo(t testing.TB, body, target string) routeView {
	t.Helper()
	status, _, b := post(t, g.admin(), "/debug/route", body, headerTarget, target)
	if status != http.StatusOK {
		t.Fatalf("/debug/route: %d %s", status, b)
	}
	var out routeView
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return out
}

// prompt returns blocks full blocks of token ids and its request body.
func prompt(base uint32, blocks int) []uint32 {
	out := make([]uint32, blocks*testBS)
	for i := range out {
		out[i] = base + uint32(i)
	}
	return out
}

func completionBody(toks []uint32, extra string) string {
	b, _ := json.Marshal(toks)
	return fmt.Sprintf(`{"model":%q,"prompt":%s,"max_tokens":2%s}`, testModel, b, extra)
}

// agent plays a worker's state agent: a local index whose changes it
// relays, and its registration.
type agent struct {
	t   testing.TB
	h   *harness
	ix  *index.Index
	pub *relay.Publisher
	rdy map[index.Source]bool
	w   discovery.Worker
}

type agentOpt func(*discovery.Worker)

func workerType(t string) agentOpt {
	return func(w *discovery.Worker) {
		w.RuntimeData, _ = w.RuntimeData.Set("router_hint_worker_type", t)
	}
}

// newAgent registers an SGLang worker with a hint capability, one rank and
// its cache owner, relaying on its own prefix.
func (h *harness) agent(id string, e *engine, opts ...agentOpt) *agent {
	h.t.Helper()
	ix, err := index.New(index.Config{BlockSize: testBS})
	if err != nil {
		h.t.Fatal(err)
	}
	a := &agent{t: h.t, h: h, ix: ix, rdy: map[index.Source]bool{}}
	a.w = discovery.Worker{ID: id, Model: testModel, URL: e.url(), Engine: "sglang", BlockSize: testBS, DPSize: 1,
		Owners: map[string]string{"0": ownerID(id)}, Events: relay.Prefix(id)}
	a.w.RuntimeData, _ = a.w.RuntimeData.Set("router_hint_source_control_endpoints", map[string]string{"0": endpointOf(id)})
	a.w.RuntimeData, _ = a.w.RuntimeData.Set("router_hint_worker_type", "aggregated")
	a.w.RuntimeData, _ = a.w.RuntimeData.Set("router_hint", true)
	for _, o := range opts {
		o(&a.w)
	}
	a.pub = relay.NewPublisher(h.bus.Conn, a.w.Events, quiet())
	if err := a.pub.ServeSnapshots(func() []relay.State {
		var out []relay.State
		for _, s := range a.ix.Sources() {
			out = append(out, relay.State{Source: s, Ready: a.rdy[s], Ops: a.ix.Dump(s)})
		}
		for s, r := range a.rdy {
			if r && len(a.ix.Dump(s)) == 0 {
				out = append(out, relay.State{Source: s, Ready: true})
			}
		}
		return out
	}); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(a.pub.Close)
	if err := discovery.Announce(context.Background(), h.reg, a.w); err != nil {
		h.t.Fatal(err)
	}
	return a
}

func ownerID(id string) string { return "owner-" + id }

// endpointOf is worker id's runner endpoint: on the host of its URL (the
// engines run on loopback), one port per id; nothing dials it.
func endpointOf(id string) string {
	return "tcp://127.0.0.1:" + strconv.Itoa(20000+int(crc32.ChecksumIEEE([]byte(id))%10000))
}

func (a *agent) rank() index.Source  { return index.WorkerRank(a.w.ID, 0) }
func (a *agent) owner() index.Source { return index.CacheOwner(ownerID(a.w.ID)) }

// engineHashes are SGLang's page hashes: what a real engine would send.
func engineHashes(toks []uint32, salt string) []uint64 {
	return kvhash.SGLangPageHashes(toks, testBS, salt)
}

func (a *agent) store(src index.Source, toks []uint32, salt string, tier kvevents.Tier) {
	a.t.Helper()
	op := index.Op{Kind: index.OpStore, Tier: tier, Hashes: engineHashes(toks, salt),
		Local: kvhash.LocalHashes(toks, testBS, kvhash.SeedFor("", salt)), BlockSize: testBS}
	if err := a.pub.Commit(src, relay.KindOps, []index.Op{op}, func() error { return a.ix.Apply(src, op) }); err != nil {
		a.t.Fatal(err)
	}
}

func (a *agent) remove(src index.Source, hashes []uint64, tier kvevents.Tier) {
	a.t.Helper()
	op := index.Op{Kind: index.OpRemove, Tier: tier, Hashes: hashes}
	if err := a.pub.Commit(src, relay.KindOps, []index.Op{op}, func() error { return a.ix.Apply(src, op) }); err != nil {
		a.t.Fatal(err)
	}
}

func (a *agent) ready(srcs ...index.Source) {
	a.t.Helper()
	for _, src := range srcs {
		if err := a.pub.Commit(src, relay.KindReady, nil, func() error { a.rdy[src] = true; return nil }); err != nil {
			a.t.Fatal(err)
		}
	}
}

// leave deregisters the worker, as an agent does on shutdown.
func (a *agent) leave() {
	a.t.Helper()
	if err := a.h.reg.Delete(context.Background(), a.w.ID); err != nil {
		a.t.Fatal(err)
	}
}

// wantHint checks the hint a route shows.
func wantHint(t testing.TB, r routeView, endpoint string, hashes []uint64) {
	t.Helper()
	if string(r.Hint) == "null" {
		t.Fatalf("no hint: %+v", r.HintDecision)
	}
	p, err := hints.Parse(r.Hint)
	if err != nil {
		t.Fatalf("hint %s: %v", r.Hint, err)
	}
	if p.Hint.Endpoint != endpoint || fmt.Sprint(p.Hint.BlockHashes) != fmt.Sprint(hashes) {
		t.Fatalf("hint %s, want %s %v", r.Hint, endpoint, hashes)
	}
}

// freeTCP is a loopback endpoint whose port was free a moment ago.
func freeTCP(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "tcp://127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}
