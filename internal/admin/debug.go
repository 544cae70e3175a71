// This file holds the views /debug/workers and /debug/route and their JSON shapes.

package admin

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"kvrouter/internal/frontdoor"
	"kvrouter/internal/hints"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/router"
)

// Views serves one router service's operator views.
type Views struct {
	Router *router.Router
	// Front takes /debug/route's requests through its own steps.
	Front *frontdoor.Server
	// Gatherer holds every metric /metrics exposes.
	Gatherer prometheus.Gatherer
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
}

type hintDecisionJSON struct {
	Reason   string        `json:"reason"`
	Source   *sourceJSON   `json:"source"`
	Start    int           `json:"start,omitempty"`
	Reach    int           `json:"reach"`
	Suffix   bool          `json:"suffix,omitempty"`
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
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

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
		Candidates:    make([]candidateJSON, len(d.Candidates)),
		Placement:     d.Target.Worker.Placement.String(),
		HintDecision:  hintDecisionOf(d.HintDecision),
		Tokens:        d.Tokens,
		Blocks:        d.Blocks,
		OverlapBlocks: d.Overlap,
		TokenizeUS:    us(e.Tokenize),
		DecideUS:      us(e.Decide),
		Hint:          json.RawMessage("null"),
	}
	for i, c := range d.Candidates {
		out.Candidates[i] = candidateJSON{c.Worker, c.Rank, c.OverlapBlocks, c.DeviceOverlap, c.HostOverlap, c.DiskOverlap,
			c.AdjustedPrefill, c.PotentialDecodeBlocks, c.ActiveRequests, c.Cost}
	}
	if d.HintDecision.Hinted() {
		out.Hint = hintJSON(d.Target.Worker.Placement, e.RequestID, d.Hint)
	}
	frontdoor.WriteJSON(w, http.StatusOK, out)
}

// hintJSON is the hint exactly as it would be placed in the body.
func hintJSON(p hints.Placement, messageID string, h hints.Hint) json.RawMessage {
	if p == hints.PlaceVLLMOld || p == hints.PlaceSGLangOld {
		return hints.AppendFlat(nil, h)
	}
	return hints.AppendEnvelope(nil, messageID, h)
}

func hintDecisionOf(d hints.Decision) hintDecisionJSON {
	out := hintDecisionJSON{Reason: d.Reason.String(), Start: d.Start, Reach: d.Reach, Suffix: d.Suffix}
	switch {
	case d.Source.Owner != "":
		out.Source = &sourceJSON{Owner: d.Source.Owner}
	case d.Source.Worker != "":
		rank := d.Source.Rank
		out.Source = &sourceJSON{WorkerID: d.Source.Worker, DPRank: &rank}
	}
	if e := d.Estimate; e.Policy != "" {
		out.Estimate = &estimateJSON{e.Policy, e.ExtraBlocks, e.Worth, e.ExtraTokens, e.Bytes, e.BandwidthBytesPerS,
			e.PrefillTokensPerS, float64(e.Pull.Microseconds()) / 1e3, float64(e.Recompute.Microseconds()) / 1e3,
			e.MeasuredBandwidth, e.MeasuredPrefill}
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
		DiscoveryLive  bool         `json:"discovery_live"`
		Workers        []workerJSON `json:"workers"`
		DetachedOwners []ownerJSON  `json:"detached_owners"`
	}{DiscoveryLive: v.Router.Stats().DiscoveryLive, Workers: []workerJSON{}, DetachedOwners: []ownerJSON{}}
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
