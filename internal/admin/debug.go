// This file holds the views /debug/workers and /debug/route and their JSON shapes.

package admin

import (
	"encoding/json"
	"math"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"kvrouter/internal/frontdoor"
	"kvrouter/internal/hints"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/router"
	"kvrouter/internal/tokcheck"
)

// Views serves one router service's operator views.
type Views struct {
	Router *router.Router
	// Front takes /debug/route's requests through its own steps.
	Front *frontdoor.Server
	// Gatherer holds every metric /metrics exposes.
	Gatherer prometheus.Gatherer
	// Tokenizer says what the router tokenizes with (--tokenizer); Check,
	// when set, holds the last check of each model's tokenization against
	// an engine's.
	Tokenizer string
	Check     *tokcheck.Checker
	// Learn, when set, is the hint learner whose estimates /debug/workers
	// shows.
	Learn *hints.Learner
}

// Mount routes the operator views on mux: GET /metrics, GET
// /debug/workers, POST /debug/route and GET /debug/inventory.
func (v *Views) Mount(mux *http.ServeMux) {
	mux.Handle("GET /metrics", promhttp.HandlerFor(v.Gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /debug/workers", v.debugWorkers)
	mux.HandleFunc("POST /debug/route", v.debugRoute)
	mux.HandleFunc("GET /debug/inventory", v.debugInventory)
}

// The operator views' JSON shapes.

type targetJSON struct {
	WorkerID string `json:"worker_id"`
	DPRank   int    `json:"dp_rank"`
}

type candidateJSON struct {
	WorkerID              string  `json:"worker_id"`
	DPRank                int     `json:"dp_rank"`
	OverlapBlocks         int     `json:"overlap_blocks"`
	DeviceOverlap         int     `json:"device_overlap"`
	HostOverlap           int     `json:"host_overlap"`
	DiskOverlap           int     `json:"disk_overlap"`
	AdjustedPrefill       float64 `json:"adjusted_prefill"`
	PotentialDecodeBlocks float64 `json:"potential_decode_blocks"`
	ActiveRequests        int     `json:"active_requests"`
	Cost                  float64 `json:"cost"`
}

type sourceJSON struct {
	WorkerID string `json:"worker_id,omitempty"`
	DPRank   *int   `json:"dp_rank,omitempty"`
	Owner    string `json:"owner,omitempty"`
}

type estimateJSON struct {
	Policy             string  `json:"policy"`
	ExtraBlocks        int     `json:"extra_blocks"`
	Worth              bool    `json:"worth"`
	ExtraTokens        int     `json:"extra_tokens,omitempty"`
	Bytes              float64 `json:"bytes,omitempty"`
	BandwidthBytesPerS float64 `json:"bandwidth_bytes_per_s,omitempty"`
	PrefillTokensPerS  float64 `json:"prefill_tokens_per_s,omitempty"`
	PullMS             float64 `json:"pull_ms,omitempty"`
	RecomputeMS        float64 `json:"recompute_ms,omitempty"`
	MeasuredBandwidth  bool    `json:"measured_bandwidth,omitempty"`
	MeasuredPrefill    bool    `json:"measured_prefill,omitempty"`
	SetupMS            float64 `json:"setup_ms,omitempty"`
	ShortShare         float64 `json:"short_share,omitempty"`
	PullSamples        float64 `json:"pull_samples,omitempty"`
	PrefillSamples     float64 `json:"prefill_samples,omitempty"`
}

type hintDecisionJSON struct {
	Reason   string        `json:"reason"`
	Source   *sourceJSON   `json:"source"`
	Reach    int           `json:"reach"`
	Estimate *estimateJSON `json:"estimate"`
}

type routeJSON struct {
	Model         string           `json:"model"`
	Target        targetJSON       `json:"target"`
	Candidates    []candidateJSON  `json:"candidates"`
	Hint          json.RawMessage  `json:"hint"`
	Placement     string           `json:"placement"`
	HintDecision  hintDecisionJSON `json:"hint_decision"`
	Tokens        int              `json:"tokens"`
	Blocks        int              `json:"blocks"`
	OverlapBlocks int              `json:"overlap_blocks"`
	TokenizeUS    float64          `json:"tokenize_us"`
	DecideUS      float64          `json:"decide_us"`
	// Disaggregated is set for a model served in two legs: the fields
	// above are then the decode leg's (where the answer comes from).
	Disaggregated *pdJSON `json:"disaggregated,omitempty"`
}

// pdJSON is a disaggregated request's plan.
type pdJSON struct {
	// Prefill is the prefill leg, hint and all; null when it is skipped.
	Prefill *legJSON `json:"prefill"`
	Decode  legJSON  `json:"decode"`
	// SkipPrefill: the decode worker runs the request alone, for
	// SkipReason. WouldSkip is the reason it would, were its engine able
	// to (an SGLang decode server is not).
	SkipPrefill    bool   `json:"skip_prefill"`
	SkipReason     string `json:"skip_reason"`
	WouldSkip      string `json:"would_skip_reason"`
	DecodeUncached int    `json:"decode_uncached_tokens"`
}

type legJSON struct {
	Target        targetJSON        `json:"target"`
	Engine        string            `json:"engine"`
	OverlapBlocks int               `json:"overlap_blocks"`
	Candidates    []candidateJSON   `json:"candidates,omitempty"`
	Hint          json.RawMessage   `json:"hint,omitempty"`
	Placement     string            `json:"placement,omitempty"`
	HintDecision  *hintDecisionJSON `json:"hint_decision,omitempty"`
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// finite leaves out (as 0, omitted) a rate that is infinite: JSON has no
// infinity.
func finite(f float64) float64 {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return 0
	}
	return f
}

// debugRoute answers the decision a request would get, without sending it
// or recording it anywhere.
func (v *Views) debugRoute(w http.ResponseWriter, r *http.Request) {
	e, ok := v.Front.Explain(w, r)
	if !ok {
		return
	}
	d := e.Decision
	out := routeJSON{
		Model:         d.Model,
		Target:        targetJSON{d.Target.Worker.ID, d.Target.Rank},
		Placement:     d.Target.Worker.Placement.String(),
		HintDecision:  hintDecisionOf(d.HintDecision),
		Tokens:        d.Tokens,
		Blocks:        d.Blocks,
		OverlapBlocks: d.Overlap,
		TokenizeUS:    us(e.Tokenize),
		DecideUS:      us(e.Decide),
		Hint:          json.RawMessage("null"),
	}
	out.Candidates = candidatesOf(d)
	if d.HintDecision.Hinted() {
		out.Hint = hintJSON(d.Target.Worker.Placement, e.RequestID, d.Hint)
	}
	if pl := e.Plan; pl != nil && pl.Disaggregated {
		pd := &pdJSON{
			Decode:      legJSON{Target: out.Target, Engine: d.Target.Worker.Engine, OverlapBlocks: d.Overlap},
			SkipPrefill: pl.Skip != router.SkipNone, SkipReason: pl.Skip.String(), WouldSkip: pl.WouldSkip.String(),
			DecodeUncached: pl.DecodeUncached,
		}
		if p := pl.Prefill; p != nil {
			hd := hintDecisionOf(p.HintDecision)
			pd.Prefill = &legJSON{Target: targetJSON{p.Target.Worker.ID, p.Target.Rank}, Engine: p.Target.Worker.Engine,
				OverlapBlocks: p.Overlap, Candidates: candidatesOf(p), Hint: json.RawMessage("null"),
				Placement: p.Target.Worker.Placement.String(), HintDecision: &hd}
			if p.HintDecision.Hinted() {
				pd.Prefill.Hint = hintJSON(p.Target.Worker.Placement, e.RequestID, p.Hint)
			}
		}
		out.Disaggregated = pd
	}
	frontdoor.WriteJSON(w, http.StatusOK, out)
}

func candidatesOf(d *router.Decision) []candidateJSON {
	out := make([]candidateJSON, len(d.Candidates))
	for i, c := range d.Candidates {
		out[i] = candidateJSON{c.Worker, c.Rank, c.OverlapBlocks, c.DeviceOverlap, c.HostOverlap, c.DiskOverlap,
			c.AdjustedPrefill, c.PotentialDecodeBlocks, c.ActiveRequests, c.Cost}
	}
	return out
}

// hintJSON is the hint exactly as it would be placed in the body.
func hintJSON(p hints.Placement, messageID string, h hints.Hint) json.RawMessage {
	if p == hints.PlaceVLLMOld || p == hints.PlaceSGLangOld {
		return hints.AppendFlat(nil, h)
	}
	return hints.AppendEnvelope(nil, messageID, h)
}

func hintDecisionOf(d hints.Decision) hintDecisionJSON {
	out := hintDecisionJSON{Reason: d.Reason.String(), Reach: d.Reach}
	switch {
	case d.Source.Owner != "":
		out.Source = &sourceJSON{Owner: d.Source.Owner}
	case d.Source.Worker != "":
		rank := d.Source.Rank
		out.Source = &sourceJSON{WorkerID: d.Source.Worker, DPRank: &rank}
	}
	if e := d.Estimate; e.Policy != "" {
		out.Estimate = &estimateJSON{Policy: e.Policy, ExtraBlocks: e.ExtraBlocks, Worth: e.Worth, ExtraTokens: e.ExtraTokens,
			Bytes: e.Bytes, BandwidthBytesPerS: finite(e.BandwidthBytesPerS), PrefillTokensPerS: finite(e.PrefillTokensPerS),
			PullMS: float64(e.Pull.Microseconds()) / 1e3, RecomputeMS: float64(e.Recompute.Microseconds()) / 1e3,
			MeasuredBandwidth: e.MeasuredBandwidth, MeasuredPrefill: e.MeasuredPrefill, SetupMS: msOf(e.Setup),
			ShortShare: e.ShortShare, PullSamples: e.PullSamples, PrefillSamples: e.PrefillSamples}
	}
	return out
}

type blocksJSON map[string]int

func blocksOf(b router.Blocks) blocksJSON {
	out := blocksJSON{}
	for t, n := range b {
		out[kvevents.Tier(t).String()] = n
	}
	return out
}

type loadJSON struct {
	PrefillTokens float64 `json:"prefill_tokens"`
	DecodeBlocks  float64 `json:"decode_blocks"`
	Requests      int     `json:"requests"`
}

type engineLoadJSON struct {
	Running      float64 `json:"running"`
	Waiting      float64 `json:"waiting"`
	KVUsage      float64 `json:"kv_usage"`
	KVUsedBlocks float64 `json:"kv_used_blocks"`
}

type rankJSON struct {
	DPRank   int             `json:"dp_rank"`
	Endpoint string          `json:"endpoint,omitempty"`
	Ready    bool            `json:"ready"`
	Blocks   blocksJSON      `json:"blocks"`
	InFlight loadJSON        `json:"in_flight"`
	Engine   *engineLoadJSON `json:"engine_metrics,omitempty"`
}

type ownerJSON struct {
	ID        string     `json:"id"`
	Worker    string     `json:"worker_id,omitempty"`
	DPRank    *int       `json:"dp_rank,omitempty"`
	Ready     bool       `json:"ready"`
	Detached  bool       `json:"detached"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	Blocks    blocksJSON `json:"blocks"`
}

// tokenizerJSON is what the router tokenizes with and how each model's
// last check against an engine's /tokenize went.
type tokenizerJSON struct {
	Tokenizer string            `json:"tokenizer"`
	Checks    []tokcheck.Status `json:"checks"`
}

type workerJSON struct {
	ID         string      `json:"id"`
	Model      string      `json:"model"`
	URL        string      `json:"url"`
	Engine     string      `json:"engine"`
	Origin     string      `json:"origin"`
	Mode       string      `json:"mode"`
	BlockSize  int         `json:"block_size"`
	DPStart    int         `json:"dp_start"`
	DPSize     int         `json:"dp_size"`
	Type       string      `json:"type"`
	CanConsume bool        `json:"can_consume_hints"`
	Placement  string      `json:"placement"`
	Refusal    string      `json:"refusal,omitempty"`
	Trusted    bool        `json:"trusted"`
	Health     healthJSON  `json:"health"`
	Ranks      []rankJSON  `json:"ranks"`
	Owners     []ownerJSON `json:"owners"`
}

// healthJSON is a worker's health: "up" or "down", since when (absent when
// it never changed), why, and when it is probed next.
type healthJSON struct {
	State     string     `json:"state"`
	Since     *time.Time `json:"since,omitempty"`
	Reason    string     `json:"reason,omitempty"`
	Failures  int        `json:"failures"`
	NextProbe *time.Time `json:"next_probe,omitempty"`
}

func healthOf(h router.Health) healthJSON {
	out := healthJSON{State: "up", Reason: h.Reason, Failures: h.Failures}
	if h.Down {
		out.State = "down"
	}
	if !h.Since.IsZero() {
		t := h.Since
		out.Since = &t
	}
	if !h.NextProbe.IsZero() {
		t := h.NextProbe
		out.NextProbe = &t
	}
	return out
}

func ownerOf(o router.OwnerView) ownerJSON {
	out := ownerJSON{ID: o.ID, Worker: o.Worker, Ready: o.Ready, Detached: o.Detached, Blocks: blocksOf(o.Blocks)}
	if o.Rank >= 0 && !o.Detached {
		rank := o.Rank
		out.DPRank = &rank
	}
	if o.Detached {
		t := o.ExpiresAt
		out.ExpiresAt = &t
	}
	return out
}

// debugWorkers lists every worker, its ranks and owners, and the detached
// owners, with readiness and index sizes per tier.
func (v *Views) debugWorkers(w http.ResponseWriter, _ *http.Request) {
	v.Router.RefreshSizes()
	ws, detached := v.Router.View()
	out := struct {
		DiscoveryLive  bool           `json:"discovery_live"`
		Tokenizer      tokenizerJSON  `json:"tokenizer"`
		Workers        []workerJSON   `json:"workers"`
		DetachedOwners []ownerJSON    `json:"detached_owners"`
		HintEstimates  *estimatesJSON `json:"hint_estimates,omitempty"`
	}{DiscoveryLive: v.Router.Stats().DiscoveryLive, Tokenizer: tokenizerJSON{Tokenizer: v.Tokenizer, Checks: []tokcheck.Status{}},
		Workers: []workerJSON{}, DetachedOwners: []ownerJSON{}}
	if v.Check != nil {
		out.Tokenizer.Checks = v.Check.Statuses()
	}
	if v.Learn != nil {
		out.HintEstimates = estimatesOf(v.Learn)
	}
	for _, wv := range ws {
		wj := workerJSON{ID: wv.ID, Model: wv.Model, URL: wv.URL, Engine: wv.Engine, Origin: wv.Origin.String(), Mode: wv.Mode.String(),
			BlockSize: wv.BlockSize, DPStart: wv.DPStart, DPSize: wv.DPSize, Type: wv.Capability.Type.String(),
			CanConsume: wv.Capability.CanConsume, Placement: wv.Placement.String(), Refusal: wv.Refusal, Trusted: wv.Trusted,
			Health: healthOf(wv.Health), Ranks: []rankJSON{}, Owners: []ownerJSON{}}
		for _, rv := range wv.Ranks {
			rj := rankJSON{DPRank: rv.Rank, Endpoint: rv.Endpoint, Ready: rv.Ready, Blocks: blocksOf(rv.Blocks),
				InFlight: loadJSON{rv.Load.PrefillTokens, rv.Load.DecodeBlocks, rv.Load.Requests}}
			if e := rv.Engine; e != nil {
				rj.Engine = &engineLoadJSON{e.Running, e.Waiting, e.KVUsage, e.KVUsedBlocks}
			}
			wj.Ranks = append(wj.Ranks, rj)
		}
		for _, o := range wv.Owners {
			wj.Owners = append(wj.Owners, ownerOf(o))
		}
		out.Workers = append(out.Workers, wj)
	}
	for _, o := range detached {
		out.DetachedOwners = append(out.DetachedOwners, ownerOf(o))
	}
	frontdoor.WriteJSON(w, http.StatusOK, out)
}
