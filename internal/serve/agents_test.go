package serve

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"kvrouter/internal/hints"
	"kvrouter/internal/kvevents"
)

// TestLongestPrefixAndHint: two SGLang workers registered by agents; a has
// 2 device blocks of the prompt, b's runner 6 runner-owned blocks, and b is
// busy, so a is chosen and told to pull b's 6 blocks from b's runner. The
// forwarded body carries our hint (the client's stripped), the DP rank in
// the body and the header.
func TestLongestPrefixAndHint(t *testing.T) {
	h := newHarness(t)
	ea, eb := newEngine(t, testModel), newEngine(t, testModel)
	a, b := h.agent("a", ea), h.agent("b", eb)
	toks := prompt(100, 8)
	a.store(a.rank(), toks[:2*testBS], "", kvevents.TierDevice)
	b.store(b.owner(), toks[:6*testBS], "", kvevents.TierExternal)
	a.ready(a.rank(), a.owner())
	b.ready(b.rank(), b.owner())
	eb.metrics = "sglang:num_running_reqs 40\nsglang:num_used_tokens 4000\n"
	g := h.service(func(o *Options) { o.EngineMetricsInterval = 10 * time.Millisecond })
	waitWorkers(t, g, 2)

	body := completionBody(toks, `,"kv_hints":{"protocol_version":"0.1","actions":[{"action_type":"kv.fetch","payload":{"source_control_endpoint":"tcp://evil:1","block_hashes":[1]}}]}`)
	var r routeView
	eventually(t, "the hint from b's runner", func() bool {
		r = g.route(t, body)
		return r.Target.WorkerID == "a" && string(r.Hint) != "null"
	})
	wantHint(t, r, endpointOf("b"), engineHashes(toks[:6*testBS], ""))
	if r.HintDecision.Reason != "hinted" || r.HintDecision.Source == nil || r.HintDecision.Source.Owner != ownerID("b") ||
		r.HintDecision.Reach != 6 || r.OverlapBlocks != 2 || r.Blocks != 8 || r.Tokens != 32 {
		t.Fatalf("route %+v", r)
	}

	status, hdr, resp := post(t, g.url(), "/v1/completions", body, "X-Request-Id", "req-1")
	if status != http.StatusOK || hdr.Get(headerWorker) != "a" {
		t.Fatalf("status %d worker %q: %s", status, hdr.Get(headerWorker), resp)
	}
	got := ea.last()
	raw, p, found, err := hints.Extract(got.Body, hints.PlaceSGLang, hints.PlaceSGLangOld)
	if err != nil || !found || p != hints.PlaceSGLang {
		t.Fatalf("hint in forwarded body: found %v placement %v err %v: %s", found, p, err, got.Body)
	}
	parsed, err := hints.Parse(raw)
	if err != nil || parsed.Hint.Endpoint != endpointOf("b") || parsed.MessageID != "req-1" {
		t.Fatalf("forwarded hint %s: %v", raw, err)
	}
	if strings.Contains(string(got.Body), "evil") {
		t.Fatalf("client hint forwarded: %s", got.Body)
	}
	var fields struct {
		DPRank *int `json:"data_parallel_rank"`
	}
	json.Unmarshal(got.Body, &fields)
	if fields.DPRank == nil || *fields.DPRank != 0 || got.Headers.Get(headerDPRank) != "0" || got.Headers.Get(headerVLLMDPRank) != "" ||
		got.Headers.Get(headerRequestID) != "req-1" {
		t.Fatalf("dp rank: body %v, headers %v", fields.DPRank, got.Headers)
	}
}

// TestHintFailsClosed: the same fleet with one thing wrong gives no hint,
// and the target stays a.
func TestHintFailsClosed(t *testing.T) {
	toks := prompt(100, 8)
	tests := []struct {
		name   string
		bType  string
		ready  bool
		salt   string
		reason string
	}{
		{name: "source not ready", bType: "aggregated", reason: "not_ready"},
		{name: "source of another type", bType: "prefill", ready: true, reason: "type_mismatch"},
		{name: "another salt", bType: "aggregated", ready: true, salt: "tenant-b", reason: "no_candidate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			a, b := h.agent("a", newEngine(t, testModel)), h.agent("b", newEngine(t, testModel), workerType(tc.bType))
			a.store(a.rank(), toks[:2*testBS], "", kvevents.TierDevice)
			b.store(b.owner(), toks[:6*testBS], "", kvevents.TierExternal)
			a.ready(a.rank(), a.owner())
			if tc.ready {
				b.ready(b.owner())
			}
			g := h.service(func(o *Options) { o.AllowTargetOverride = true })
			waitWorkers(t, g, 2)
			body := completionBody(toks, `,"cache_salt":"`+tc.salt+`"`)
			// b's own runner would draw the request to b; the target is
			// forced to a to look at a's hint.
			var r routeView
			eventually(t, "the inventory", func() bool {
				r = g.routeTo(t, body, "a")
				return r.HintDecision.Reason == tc.reason
			})
			if string(r.Hint) != "null" {
				t.Fatalf("hint %s", r.Hint)
			}
		})
	}
}

// TestRemovalAndLateRouter: the router starts after the agent stored its
// blocks (snapshot), follows live removals, and loses the hint when the
// source evicts.
func TestRemovalAndLateRouter(t *testing.T) {
	h := newHarness(t)
	a, b := h.agent("a", newEngine(t, testModel)), h.agent("b", newEngine(t, testModel))
	toks := prompt(7, 8)
	a.store(a.rank(), toks[:2*testBS], "", kvevents.TierDevice)
	b.store(b.rank(), toks[:7*testBS], "", kvevents.TierDevice)
	a.ready(a.rank(), a.owner())
	b.ready(b.rank(), b.owner())
	g := h.service(nil) // late: everything above came before it
	waitWorkers(t, g, 2)
	body := completionBody(toks, "")
	var r routeView
	eventually(t, "the initial inventory", func() bool {
		r = g.route(t, body)
		return r.OverlapBlocks == 7
	})
	if r.Target.WorkerID != "b" {
		t.Fatalf("target %+v", r.Target)
	}
	// Force a: b's device prefix is the hint.
	status, _, resp := post(t, g.admin(), "/debug/route", body, headerTarget, "a")
	if status != http.StatusForbidden || !strings.Contains(string(resp), "--allow-target-override") {
		t.Fatalf("override without the flag: %d %s", status, resp)
	}
	g2 := h.service(func(o *Options) { o.AllowTargetOverride = true })
	waitWorkers(t, g2, 2)
	var forced routeView
	eventually(t, "the forced route's hint", func() bool {
		forced = g2.routeTo(t, body, "a")
		return forced.Target.WorkerID == "a" && string(forced.Hint) != "null"
	})
	wantHint(t, forced, endpointOf("b"), engineHashes(toks[:7*testBS], ""))

	b.remove(b.rank(), engineHashes(toks[:7*testBS], "")[2:], kvevents.TierDevice)
	eventually(t, "the removal", func() bool {
		forced = g2.routeTo(t, body, "a")
		return string(forced.Hint) == "null"
	})
	if forced.HintDecision.Reason != "not_beyond_target" {
		t.Fatalf("after removal: %+v", forced.HintDecision)
	}
}

// TestWorkerLeaves: a lease that runs out removes the worker; a worker
// that deregisters leaves its cache owner a hint source until
// --detached-owner-ttl, then not.
func TestWorkerLeaves(t *testing.T) {
	h := newHarness(t)
	a, b, c := h.agent("a", newEngine(t, testModel)), h.agent("b", newEngine(t, testModel)), h.agent("c", newEngine(t, testModel))
	toks := prompt(900, 6)
	a.store(a.rank(), toks[:1*testBS], "", kvevents.TierDevice)
	b.store(b.owner(), toks[:6*testBS], "", kvevents.TierExternal)
	a.ready(a.rank(), a.owner())
	b.ready(b.rank(), b.owner())
	g := h.service(func(o *Options) { o.DetachedOwnerTTL = time.Minute; o.AllowTargetOverride = true })
	waitWorkers(t, g, 3)
	body := completionBody(toks, "")

	eventually(t, "b's runner as source", func() bool { return string(g.routeTo(t, body, "a").Hint) != "null" })
	b.leave()
	eventually(t, "b gone from the table", func() bool { _, ok := g.Router.Worker("b"); return !ok })
	r := g.route(t, body)
	if r.Target.WorkerID != "a" {
		t.Fatalf("target %+v, want a (b left, c holds nothing)", r.Target)
	}
	wantHint(t, r, endpointOf("b"), engineHashes(toks, ""))
	var workers struct {
		Detached []ownerView `json:"detached_owners"`
	}
	json.Unmarshal(get(t, g.admin()+"/debug/workers"), &workers)
	if len(workers.Detached) != 1 || workers.Detached[0].ID != ownerID("b") || !workers.Detached[0].Detached {
		t.Fatalf("detached owners %+v", workers.Detached)
	}

	h.clock.Advance(time.Minute)
	eventually(t, "the detached owner to expire", func() bool {
		r := g.route(t, body)
		return string(r.Hint) == "null" && r.HintDecision.Reason != "hinted"
	})

	// c's lease runs out: its agent stopped refreshing.
	h.clock.Advance(11 * time.Second)
	h.reg.Sweep()
	eventually(t, "the expired lease", func() bool { _, ok := g.Router.Worker("c"); return !ok })
	var models struct {
		Data []struct{ ID string } `json:"data"`
	}
	json.Unmarshal(get(t, g.url()+"/v1/models"), &models)
	if len(models.Data) != 0 {
		t.Fatalf("models after every lease expired: %+v", models)
	}
	_ = c
}
