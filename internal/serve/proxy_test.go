package serve

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"kvrouter/internal/cost"
	"kvrouter/internal/direct"
	"kvrouter/internal/router"
	"kvrouter/internal/tokenizer"
)

// spec is a --worker for an engine, in approximate mode unless given
// events.
func spec(t testing.TB, e *engine, extra string) direct.WorkerSpec {
	t.Helper()
	s, err := direct.ParseWorkerSpec("url=" + e.url() + ",block_size=4" + extra)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func waitWorkers(t testing.TB, g *Service, n int) {
	t.Helper()
	eventually(t, "workers to register", func() bool { return len(g.Router.AllWorkers()) == n })
}

// TestStreamPassThrough: an SSE stream comes through event by event; the
// usage chunk the router asked for is counted and, since the client did
// not ask for it, not passed on.
func TestStreamPassThrough(t *testing.T) {
	h := newHarness(t)
	e := newEngine(t, testModel)
	e.cached, e.peer = 8, 4
	g := h.service(func(o *Options) { o.Workers = []direct.WorkerSpec{spec(t, e, "")} })
	waitWorkers(t, g, 1)
	for _, tc := range []struct {
		extra     string
		wantUsage bool
	}{{`,"stream":true`, false}, {`,"stream":true,"stream_options":{"include_usage":true}`, true}} {
		status, hdr, body := post(t, g.url(), "/v1/completions", completionBody(prompt(1, 3), tc.extra))
		if status != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("status %d %v", status, hdr)
		}
		want := "data: {\"choices\":[{\"index\":0,\"text\":\"a\"}]}\n\ndata: {\"choices\":[{\"index\":0,\"text\":\"b\"}]}\n\n"
		if tc.wantUsage {
			want += "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":2,\"total_tokens\":12,\"prompt_tokens_details\":{\"cached_tokens\":8},\"kvrouter\":{\"peer_restored_tokens\":4}}}\n\n"
		}
		want += "data: [DONE]\n\n"
		if string(body) != want {
			t.Fatalf("stream\n got %q\nwant %q", body, want)
		}
		var sent struct {
			StreamOptions map[string]bool `json:"stream_options"`
		}
		json.Unmarshal(e.last().Body, &sent)
		if !sent.StreamOptions["include_usage"] {
			t.Fatalf("usage not asked for upstream: %s", e.last().Body)
		}
	}
	m := string(get(t, g.admin()+"/metrics"))
	for _, line := range []string{`kvrouter_cached_tokens_total{hinted="false"} 16`, `kvrouter_peer_restored_tokens_total{hinted="false"} 8`,
		`kvrouter_requests_total{outcome="ok"} 2`, `kvrouter_workers{mode="approximate"} 1`} {
		if !strings.Contains(m, line+"\n") {
			t.Errorf("metrics lack %s", line)
		}
	}
}

// TestStreamCancellation: a client that goes away mid-stream cancels the
// upstream request, and the request's load is released.
func TestStreamCancellation(t *testing.T) {
	h := newHarness(t)
	e := newEngine(t, testModel)
	e.hold = make(chan struct{})
	g := h.service(func(o *Options) { o.Workers = []direct.WorkerSpec{spec(t, e, "")} })
	waitWorkers(t, g, 1)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.url()+"/v1/completions",
		strings.NewReader(completionBody(prompt(1, 3), `,"stream":true`)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.Contains(line, `"text":"a"`) {
		t.Fatalf("first event %q: %v", line, err)
	}
	inFlight := func() int { return g.Router.Load().Of(rankOf(e)).Requests }
	if inFlight() != 1 {
		t.Fatalf("in flight %d, want 1", inFlight())
	}
	cancel()
	resp.Body.Close()
	select {
	case <-e.canceled:
	case <-time.After(waitLimit):
		t.Fatal("the upstream request was not canceled")
	}
	eventually(t, "the load to be released", func() bool { return inFlight() == 0 })
	eventually(t, "the canceled outcome", func() bool {
		return strings.Contains(string(get(t, g.admin()+"/metrics")), `kvrouter_requests_total{outcome="canceled"} 1`)
	})
}

func rankOf(e *engine) cost.Rank { return cost.Rank{Worker: e.hostPort(), DP: 0} }

// TestRetryOnRefused: the first choice refuses the connection; the
// request goes to the other worker, once.
func TestRetryOnRefused(t *testing.T) {
	h := newHarness(t)
	live, dead := newEngine(t, testModel), newEngine(t, testModel)
	deadSpec := spec(t, dead, ",model="+testModel)
	dead.srv.Close()
	g := h.service(func(o *Options) { o.Workers = []direct.WorkerSpec{spec(t, live, ""), deadSpec} })
	waitWorkers(t, g, 2)
	// Make the dead worker the cheaper one.
	g.Router.Load().Start("busy", rankOf(live), 1e5, 0)
	status, hdr, body := post(t, g.url(), "/v1/completions", completionBody(prompt(1, 2), ""))
	if status != http.StatusOK || hdr.Get(headerWorker) != live.hostPort() {
		t.Fatalf("status %d worker %q: %s", status, hdr.Get(headerWorker), body)
	}
	metrics := string(get(t, g.admin()+"/metrics"))
	if !strings.Contains(metrics, "kvrouter_retries_total 1\n") {
		t.Fatal("retry not counted")
	}
	if !strings.Contains(metrics, "kvrouter_upstream_resends_total 0\n") {
		t.Fatal("upstream resends not exported")
	}
	// Forced onto the dead worker there is no retry.
	g2 := h.service(func(o *Options) { o.Workers = []direct.WorkerSpec{deadSpec}; o.AllowTargetOverride = true })
	waitWorkers(t, g2, 1)
	status, _, body = post(t, g2.url(), "/v1/completions", completionBody(prompt(1, 2), ""), headerTarget, deadSpec.ID)
	if status != http.StatusBadGateway || !strings.Contains(string(body), "refused") {
		t.Fatalf("forced onto a dead worker: %d %s", status, body)
	}
}

// TestClientErrors: what the front door refuses, and how.
func TestClientErrors(t *testing.T) {
	h := newHarness(t)
	e := newEngine(t, testModel)
	g := h.service(func(o *Options) { o.Workers = []direct.WorkerSpec{spec(t, e, "")} })
	waitWorkers(t, g, 1)
	tests := []struct {
		name   string
		path   string
		body   string
		hdr    []string
		status int
		want   string
	}{
		{"unknown model", "/v1/completions", `{"model":"nope","prompt":"hi"}`, nil, 404, `model \"nope\" is not served by any worker (served: demo)`},
		{"no prompt", "/v1/completions", `{"model":"demo"}`, nil, 400, "prompt is required"},
		{"bad token id", "/v1/completions", `{"model":"demo","prompt":[1,-2]}`, nil, 400, "prompt[1] = -2"},
		{"no messages", "/v1/chat/completions", `{"model":"demo"}`, nil, 400, "messages is required"},
		{"not JSON", "/v1/chat/completions", `{"model":`, nil, 400, "invalid_request_error"},
		{"override off", "/v1/completions", `{"model":"demo","prompt":"hi"}`, []string{headerTarget, "x"}, 403, "--allow-target-override"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := post(t, g.url(), tc.path, tc.body, tc.hdr...)
			if status != tc.status || !strings.Contains(string(body), tc.want) {
				t.Fatalf("%d %s, want %d containing %q", status, body, tc.status, tc.want)
			}
			var eb struct {
				Error struct {
					Message, Type string
					Code          int
				}
			}
			if json.Unmarshal(body, &eb) != nil || eb.Error.Code != tc.status || eb.Error.Type == "" {
				t.Fatalf("not an OpenAI error body: %s", body)
			}
		})
	}
	if len(e.requests()) != 0 {
		t.Fatalf("refused requests reached the engine: %d", len(e.requests()))
	}
}

// TestApproximateMode: without events the router remembers where it sent a
// prompt, and the chat path tokenizes with the chat template.
func TestApproximateMode(t *testing.T) {
	h := newHarness(t)
	e1, e2, e3 := newEngine(t, testModel), newEngine(t, testModel), newEngine(t, testModel)
	g := h.service(func(o *Options) {
		o.Workers = []direct.WorkerSpec{spec(t, e1, ""), spec(t, e2, ""), spec(t, e3, "")}
	})
	waitWorkers(t, g, 3)
	chat := `{"model":"demo","messages":[{"role":"system","content":"You are a careful assistant who answers briefly."},{"role":"user","content":[{"type":"text","text":"Name three rivers of Europe, please."}]}]}`
	first := g.route(t, chat)
	want := tokenizer.Default().Encode("<|im_start|>system\nYou are a careful assistant who answers briefly.<|im_end|>\n"+
		"<|im_start|>user\nName three rivers of Europe, please.<|im_end|>\n<|im_start|>assistant\n", false)
	if first.OverlapBlocks != 0 || first.Tokens != len(want) || first.Blocks != len(want)/testBS {
		t.Fatalf("first route %+v, want %d tokens", first, len(want))
	}
	status, hdr, body := post(t, g.url(), "/v1/chat/completions", chat)
	if status != http.StatusOK || hdr.Get(headerWorker) != first.Target.WorkerID {
		t.Fatalf("status %d on %q, route said %q: %s", status, hdr.Get(headerWorker), first.Target.WorkerID, body)
	}
	again := g.route(t, chat)
	if again.Target != first.Target || again.OverlapBlocks != first.Blocks || string(again.Hint) != "null" {
		t.Fatalf("after sending: %+v", again)
	}
	var ws struct {
		Workers []workerView `json:"workers"`
	}
	json.Unmarshal(get(t, g.admin()+"/debug/workers"), &ws)
	for _, w := range ws.Workers {
		if w.Mode != "approximate" || w.Origin != "flag" {
			t.Fatalf("worker %+v", w)
		}
	}
}

// TestDebugShapes pins the JSON keys of the operator views.
func TestDebugShapes(t *testing.T) {
	h := newHarness(t)
	e := newEngine(t, testModel)
	g := h.service(func(o *Options) { o.Workers = []direct.WorkerSpec{spec(t, e, ",type=aggregated,engine=sglang,dp=2")} })
	waitWorkers(t, g, 1)
	keys := func(b []byte) map[string]any {
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%v: %s", err, b)
		}
		return m
	}
	_, _, b := post(t, g.admin(), "/debug/route", completionBody(prompt(5, 3), ""))
	route := keys(b)
	for _, k := range []string{"target", "candidates", "hint", "hint_decision", "tokens", "blocks"} {
		if _, ok := route[k]; !ok {
			t.Errorf("/debug/route lacks %q: %s", k, b)
		}
	}
	cands := route["candidates"].([]any)
	if len(cands) != 2 {
		t.Fatalf("candidates %v", cands)
	}
	for _, k := range []string{"worker_id", "dp_rank", "overlap_blocks", "device_overlap", "host_overlap", "disk_overlap",
		"adjusted_prefill", "potential_decode_blocks", "active_requests", "cost"} {
		if _, ok := cands[1].(map[string]any)[k]; !ok {
			t.Errorf("candidate lacks %q", k)
		}
	}
	for _, k := range []string{"reason", "source", "reach", "estimate"} {
		if _, ok := route["hint_decision"].(map[string]any)[k]; !ok {
			t.Errorf("hint_decision lacks %q", k)
		}
	}
	if tg := route["target"].(map[string]any); tg["worker_id"] != e.hostPort() {
		t.Errorf("target %v", tg)
	}
	b = get(t, g.admin()+"/debug/workers")
	var ws struct {
		DiscoveryLive bool         `json:"discovery_live"`
		Workers       []workerView `json:"workers"`
	}
	json.Unmarshal(b, &ws)
	if len(ws.Workers) != 1 {
		t.Fatalf("%s", b)
	}
	w := ws.Workers[0]
	if w.Mode != "approximate" || w.Type != "aggregated" || !w.CanConsume || w.Placement != "sglang" || w.Engine != router.EngineSGLang ||
		len(w.Ranks) != 2 || w.Ranks[1].DPRank != 1 || w.Ranks[1].Blocks["device"] != 0 || w.BlockSize != 4 {
		t.Fatalf("worker %s", b)
	}
	if b := get(t, g.url()+"/healthz"); !strings.Contains(string(b), `"status": "ok"`) {
		t.Fatalf("healthz %s", b)
	}
	io.Discard.Write(b)
}

// TestPooledBuffers: requests share pooled buffers for their bodies, token
// ids and forwarded bodies; concurrent requests of every size, streamed or
// not, each reach the engine exactly as sent plus the members the router
// sets, whatever the request before them in the same buffers held.
func TestPooledBuffers(t *testing.T) {
	h := newHarness(t)
	e := newEngine(t, testModel)
	g := h.service(func(o *Options) { o.Workers = []direct.WorkerSpec{spec(t, e, ",engine=sglang,dp=2")} })
	waitWorkers(t, g, 1)
	const clients, each = 6, 25
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := range each {
				// Sizes swing from one block to a few hundred, so that a
				// short body lands in memory a long one used.
				blocks := 1 + (c*each+i)*37%300
				toks := prompt(uint32(c*1_000_000+i*1_000), blocks)
				extra := ""
				if i%3 == 0 {
					extra = `,"stream":true`
				}
				status, _, body := post(t, g.url(), "/v1/completions", completionBody(toks, extra))
				if status != http.StatusOK {
					t.Errorf("status %d: %s", status, body)
				}
			}
		})
	}
	wg.Wait()
	got := e.requests()
	if len(got) != clients*each {
		t.Fatalf("engine got %d requests, want %d", len(got), clients*each)
	}
	seen := map[uint32]bool{}
	for _, r := range got {
		var b struct {
			Prompt []uint32 `json:"prompt"`
			Rank   *int     `json:"data_parallel_rank"`
			Stream bool     `json:"stream"`
			Opts   *struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		if err := json.Unmarshal(r.Body, &b); err != nil {
			t.Fatalf("forwarded body is not JSON (%v): %.200s", err, r.Body)
		}
		if len(b.Prompt) == 0 || b.Rank == nil || b.Stream != (b.Opts != nil && b.Opts.IncludeUsage) {
			t.Fatalf("forwarded body lost what was sent or set: %.200s", r.Body)
		}
		want := prompt(b.Prompt[0], len(b.Prompt)/testBS)
		if !slices.Equal(b.Prompt, want) || seen[b.Prompt[0]] {
			t.Fatalf("prompt starting %d arrived altered or twice", b.Prompt[0])
		}
		seen[b.Prompt[0]] = true
	}
}

// TestUpstreamIdleTimeout: --upstream-idle-timeout reaches the client that
// forwards to engines.
func TestUpstreamIdleTimeout(t *testing.T) {
	h := newHarness(t)
	e := newEngine(t, testModel)
	g := h.service(func(o *Options) {
		o.Workers = []direct.WorkerSpec{spec(t, e, "")}
		o.UpstreamIdleTimeout = 1500 * time.Millisecond
	})
	if got := g.Server.Upstream.IdleTimeout; got != 1500*time.Millisecond {
		t.Fatalf("upstream idle timeout %v, want 1.5s", got)
	}
}
