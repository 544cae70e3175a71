// This file holds disaggregated serving's decisions: which legs a request runs and on which workers.

package router

import (
	"fmt"
	"slices"

	"kvrouter/internal/cost"
	"kvrouter/internal/hints"
)

// Leg is the part of a request a decision chooses a worker for.
type Leg uint8

const (
	// LegAny: every worker of the model (Decide's default).
	LegAny Leg = iota
	// LegWhole: a worker that serves a whole request on its own: an
	// aggregated one, or a prefill or decode vLLM engine (vLLM serves a
	// request without kv_transfer_params as any engine does). An SGLang
	// engine in a disaggregation mode does not: it waits for, or on, its
	// peer.
	LegWhole
	// LegPrefill and LegDecode: workers of that role.
	LegPrefill
	LegDecode
)

func (l Leg) String() string {
	switch l {
	case LegWhole:
		return "whole"
	case LegPrefill:
		return "prefill"
	case LegDecode:
		return "decode"
	}
	return "any"
}

// admits reports whether a worker may serve leg l.
func (l Leg) admits(w *Worker) bool {
	switch l {
	case LegWhole:
		return !w.Split() || w.Engine == EngineVLLM
	case LegPrefill:
		return w.Role == hints.TypePrefill
	case LegDecode:
		return w.Role == hints.TypeDecode
	}
	return true
}

// Split reports whether the worker serves one leg of disaggregated requests.
func (w *Worker) Split() bool { return w.Role == hints.TypePrefill || w.Role == hints.TypeDecode }

// CanSkipPrefill reports whether the worker, a decode worker, can run a
// request whose prefill leg was skipped: vLLM serves a request without
// kv_transfer_params whatever its KV role; an SGLang decode server refuses
// a request without the bootstrap fields of the prefill it is to wait for.
func (w *Worker) CanSkipPrefill() bool { return w.Engine == EngineVLLM }

// PDConfig configures disaggregated serving.
type PDConfig struct {
	// LocalPrefillTokens skips the prefill leg (conditional
	// disaggregation) when the decode worker would compute fewer prompt
	// tokens than this itself: what it holds of the prompt leaves a short
	// rest, cheaper to prefill in place than to hand over. 0 never skips
	// on this ground.
	LocalPrefillTokens int
	// LocalPrefillFraction skips the prefill leg when the decode worker
	// holds at least this fraction of the prompt's blocks; 0 never skips on
	// this ground.
	LocalPrefillFraction float64
	// DecodePrefillScale prices, for the choice of the decode worker, the
	// prompt blocks it lacks: it pulls them from the prefill worker rather
	// than computing them, so they weigh this fraction of
	// cost.Weights.PrefillLoadScale against its decode load.
	DecodePrefillScale float64
}

// DefaultPD is kvrouter serve's default: skip the prefill leg when the
// decode worker would compute fewer than 2,048 prompt tokens itself. On the
// agentic benchmark (docs/benchmarks.md, `bench routing --pd`), whose
// follow-up turns leave a rest of about 1,100 tokens, 256 and 1,024 skip
// none of them; 2,048 runs most on their decode worker, halving TTFT p50
// against every request in two legs for 2 ms more ITL p90, still below
// aggregated serving's.
func DefaultPD() PDConfig {
	return PDConfig{LocalPrefillTokens: 2048, DecodePrefillScale: 0.25}
}

// Check reports a configuration that cannot work, naming the flag.
func (c PDConfig) Check() error {
	switch {
	case c.LocalPrefillTokens < 0:
		return fmt.Errorf("--pd-local-prefill-tokens %d must not be negative", c.LocalPrefillTokens)
	case !(c.LocalPrefillFraction >= 0 && c.LocalPrefillFraction <= 1):
		return fmt.Errorf("--pd-local-prefill-fraction %v must be within 0..1", c.LocalPrefillFraction)
	case !(c.DecodePrefillScale >= 0) || c.DecodePrefillScale > 1e6:
		return fmt.Errorf("--pd-decode-prefill-scale %v must be a non-negative number", c.DecodePrefillScale)
	}
	return nil
}

// SkipReason says why a disaggregated request's prefill leg is skipped.
type SkipReason uint8

const (
	SkipNone SkipReason = iota
	// SkipShortRest: the decode worker would compute fewer prompt tokens
	// than PDConfig.LocalPrefillTokens.
	SkipShortRest
	// SkipMostlyCached: the decode worker holds at least
	// PDConfig.LocalPrefillFraction of the prompt.
	SkipMostlyCached
)

func (s SkipReason) String() string {
	switch s {
	case SkipShortRest:
		return "short_rest"
	case SkipMostlyCached:
		return "mostly_cached"
	}
	return "none"
}

// Plan is how a request is served: by one worker (Prefill nil), or in two
// legs, the prefill worker computing the prompt's KV and the decode worker
// pulling it and generating.
type Plan struct {
	// Decode is the decode leg, or the whole request when Prefill is nil.
	Decode *Decision
	// Prefill is the prefill leg; it carries the request's hint.
	Prefill *Decision
	// Disaggregated: the model has a prefill and a decode worker to serve
	// the request with; Prefill is nil only if the prefill leg is skipped.
	Disaggregated bool
	// Skip says why the prefill leg is skipped; SkipNone with Prefill set.
	Skip SkipReason
	// WouldSkip is why the prefill leg would be skipped were the decode
	// worker able to run the whole request (an SGLang one is not);
	// SkipNone when it would run anyway.
	WouldSkip SkipReason
	// DecodeUncached is the prompt tokens the decode worker lacks: what it
	// would compute itself were the prefill leg skipped.
	DecodeUncached int
}

// Plan decides how to serve a request. A model whose workers include a
// prefill and a decode worker (not down, not excluded) is served
// disaggregated: the decode worker is chosen first, by its decode load and
// what it holds of the prompt (prompt blocks it lacks weigh
// PDConfig.DecodePrefillScale, as it pulls them), then, unless it can run
// the request alone cheaply (PDConfig), the prefill worker by the usual
// cost and with the hint. Otherwise one worker serves the whole request
// (LegWhole when the model has role workers; every worker when it has
// none, exactly as Decide). A forced target serves the whole request
// whatever its role.
func (r *Router) Plan(req Request, cfg PDConfig) (*Plan, error) {
	if req.Target != "" {
		d, err := r.Decide(req)
		if err != nil {
			return nil, err
		}
		return &Plan{Decode: d}, nil
	}
	split, prefill, decode := r.legsOf(req)
	if !split {
		d, err := r.Decide(req)
		if err != nil {
			return nil, err
		}
		return &Plan{Decode: d}, nil
	}
	if !prefill || !decode {
		req.Leg = LegWhole
		d, err := r.Decide(req)
		if err != nil {
			return nil, err
		}
		return &Plan{Decode: d}, nil
	}
	dreq := req
	dreq.Leg = LegDecode
	w := r.cfg.Weights
	w.PrefillLoadScale *= cfg.DecodePrefillScale
	dreq.weights = &w
	dd, err := r.Decide(dreq)
	if err != nil {
		return nil, err
	}
	p := &Plan{Decode: dd, Disaggregated: true}
	p.DecodeUncached, p.WouldSkip = cfg.skip(dd)
	if p.WouldSkip != SkipNone && dd.Target.Worker.CanSkipPrefill() {
		// The decode worker runs the request alone, with the hint it
		// gets as any target.
		p.Skip = p.WouldSkip
		return p, nil
	}
	preq := req
	preq.Leg, preq.Engine = LegPrefill, dd.Target.Worker.Engine
	pd, err := r.Decide(preq)
	if err != nil {
		return nil, err
	}
	p.Prefill = pd
	// The decode leg pulls the prompt's KV from the prefill worker: a hint
	// on it would name another source for the same blocks.
	dd.Hint, dd.HintDecision = hints.Hint{}, hints.Decision{Reason: hints.ReasonDisabled}
	return p, nil
}

// skip says whether the decode leg's target can run the request alone.
func (c PDConfig) skip(d *Decision) (uncached int, why SkipReason) {
	if d.Tokens == 0 {
		// Unknown prompt (not tokenized): nothing says what it holds.
		return 0, SkipNone
	}
	uncached = max(0, d.Tokens-d.Overlap*d.Target.Worker.BlockSize)
	switch {
	case c.LocalPrefillTokens > 0 && uncached < c.LocalPrefillTokens:
		return uncached, SkipShortRest
	case c.LocalPrefillFraction > 0 && d.Blocks > 0 && float64(d.Overlap) >= c.LocalPrefillFraction*float64(d.Blocks):
		return uncached, SkipMostlyCached
	}
	return uncached, SkipNone
}

// legsOf reports whether req's model has workers with a prefill or decode
// role, and whether a prefill and a decode worker are left to choose (not
// down, not excluded).
func (r *Router) legsOf(req Request) (split, prefill, decode bool) {
	r.rlockLinked()
	defer r.mu.RUnlock()
	model, _, _, _ := r.resolve(req.Model, req.LoRA) // an adapter's workers are its base model's
	if !r.shapes[model].split {
		return false, false, false
	}
	anyDown := r.down.Load() > 0
	for _, e := range r.models[model] {
		if !e.w.Split() || slices.Contains(req.Exclude, e.w.ID) || (anyDown && e.down.Load()) {
			continue
		}
		prefill = prefill || e.w.Role == hints.TypePrefill
		decode = decode || e.w.Role == hints.TypeDecode
	}
	return true, prefill, decode
}

// weightsFor is the cost weights req is priced with.
func (r *Router) weightsFor(req *Request) *cost.Weights {
	if req.weights != nil {
		return req.weights
	}
	return &r.cfg.Weights
}
