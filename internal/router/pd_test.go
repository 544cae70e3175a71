package router

import (
	"errors"
	"testing"

	"kvrouter/internal/cost"
	"kvrouter/internal/hints"
	"kvrouter/internal/index"
	"kvrouter/internal/kvevents"
)

// role is a hint-capable worker of a role and engine.
func role(id string, t hints.WorkerType, engine string) Worker {
	w := agg(id, 1)
	w.Role, w.Engine, w.Capability.Type = t, engine, t
	if engine == EngineVLLM {
		w.Placement = hints.PlaceVLLM
	}
	return w
}

// TestPlan: who serves each leg, and when the prefill leg is skipped.
func TestPlan(t *testing.T) {
	prompt := tokens(700, 16) // 64 tokens
	pd := PDConfig{LocalPrefillTokens: 20, DecodePrefillScale: 0.25}
	type want struct {
		prefill, decode string // "" : no such leg
		disagg          bool
		skip, would     SkipReason
		uncached        int
		err             error
		prefillHinted   bool
	}
	tests := []struct {
		name    string
		workers []Worker
		setup   func(f *fleet)
		req     Request
		cfg     *PDConfig
		want    want
	}{
		{name: "aggregated fleet: one worker, as Decide",
			workers: []Worker{agg("a", 1), agg("b", 1)},
			setup: func(f *fleet) {
				f.store("b", index.WorkerRank("b", 0), storeOp(prompt[:8*bs], "", kvevents.TierDevice))
			},
			want: want{decode: "b"}},
		{name: "a pair: the prompt's holder prefills, the idle decode worker decodes",
			workers: []Worker{role("p1", hints.TypePrefill, EngineVLLM), role("p2", hints.TypePrefill, EngineVLLM),
				role("d1", hints.TypeDecode, EngineVLLM)},
			setup: func(f *fleet) {
				f.store("p2", index.WorkerRank("p2", 0), storeOp(prompt[:8*bs], "", kvevents.TierDevice))
			},
			want: want{prefill: "p2", decode: "d1", disagg: true, uncached: 64}},
		{name: "the prefill leg is hinted from a prefill peer",
			workers: []Worker{role("p1", hints.TypePrefill, EngineVLLM), role("p2", hints.TypePrefill, EngineVLLM),
				role("d1", hints.TypeDecode, EngineVLLM)},
			setup: func(f *fleet) {
				f.store("p2", index.CacheOwner("owner-p2-0"), storeOp(prompt[:12*bs], "", kvevents.TierExternal))
				f.store("p1", index.WorkerRank("p1", 0), storeOp(prompt[:2*bs], "", kvevents.TierDevice))
				f.r.Load().Start("busy", cost.Rank{Worker: "p2", DP: 0}, 4000, 100)
			},
			want: want{prefill: "p1", decode: "d1", disagg: true, uncached: 64, prefillHinted: true}},
		{name: "a decode worker holding all but a short rest runs the request alone",
			workers: []Worker{role("p1", hints.TypePrefill, EngineVLLM), role("d1", hints.TypeDecode, EngineVLLM),
				role("d2", hints.TypeDecode, EngineVLLM)},
			setup: func(f *fleet) {
				f.store("d2", index.WorkerRank("d2", 0), storeOp(prompt[:12*bs], "", kvevents.TierDevice))
			},
			want: want{decode: "d2", disagg: true, skip: SkipShortRest, would: SkipShortRest, uncached: 16}},
		{name: "an SGLang decode worker cannot run it alone: the prefill leg runs",
			workers: []Worker{role("p1", hints.TypePrefill, EngineSGLang), role("d1", hints.TypeDecode, EngineSGLang)},
			setup: func(f *fleet) {
				f.store("d1", index.WorkerRank("d1", 0), storeOp(prompt[:15*bs], "", kvevents.TierDevice))
			},
			want: want{prefill: "p1", decode: "d1", disagg: true, would: SkipShortRest, uncached: 4}},
		{name: "holding most of the prompt skips by fraction",
			workers: []Worker{role("p1", hints.TypePrefill, EngineVLLM), role("d1", hints.TypeDecode, EngineVLLM)},
			setup: func(f *fleet) {
				f.store("d1", index.WorkerRank("d1", 0), storeOp(prompt[:12*bs], "", kvevents.TierDevice))
			},
			cfg:  &PDConfig{LocalPrefillFraction: 0.75},
			want: want{decode: "d1", disagg: true, skip: SkipMostlyCached, would: SkipMostlyCached, uncached: 16}},
		{name: "no threshold: always two legs",
			workers: []Worker{role("p1", hints.TypePrefill, EngineVLLM), role("d1", hints.TypeDecode, EngineVLLM)},
			setup: func(f *fleet) {
				f.store("d1", index.WorkerRank("d1", 0), storeOp(prompt[:15*bs], "", kvevents.TierDevice))
			},
			cfg:  &PDConfig{},
			want: want{prefill: "p1", decode: "d1", disagg: true, uncached: 4}},
		{name: "decode chosen by load before its cache",
			workers: []Worker{role("p1", hints.TypePrefill, EngineVLLM), role("d1", hints.TypeDecode, EngineVLLM),
				role("d2", hints.TypeDecode, EngineVLLM)},
			setup: func(f *fleet) {
				f.store("d1", index.WorkerRank("d1", 0), storeOp(prompt[:4*bs], "", kvevents.TierDevice))
				f.r.Load().Start("busy", cost.Rank{Worker: "d1", DP: 0}, 0, 200)
			},
			want: want{prefill: "p1", decode: "d2", disagg: true, uncached: 64}},
		{name: "prefill workers excluded: the whole request on the vLLM decode worker",
			workers: []Worker{role("p1", hints.TypePrefill, EngineVLLM), role("d1", hints.TypeDecode, EngineVLLM)},
			req:     Request{Exclude: []string{"p1"}},
			want:    want{decode: "d1"}},
		{name: "SGLang without a prefill worker: an aggregated one serves it",
			workers: []Worker{role("p1", hints.TypePrefill, EngineSGLang), role("d1", hints.TypeDecode, EngineSGLang), agg("a", 1)},
			req:     Request{Exclude: []string{"p1"}},
			want:    want{decode: "a"}},
		{name: "SGLang without a prefill worker nor an aggregated one: none",
			workers: []Worker{role("p1", hints.TypePrefill, EngineSGLang), role("d1", hints.TypeDecode, EngineSGLang)},
			req:     Request{Exclude: []string{"p1"}},
			want:    want{err: ErrNoWorker}},
		{name: "the prefill leg speaks the decode worker's protocol",
			workers: []Worker{role("p1", hints.TypePrefill, EngineSGLang), role("p2", hints.TypePrefill, EngineVLLM),
				role("d1", hints.TypeDecode, EngineVLLM)},
			setup: func(f *fleet) {
				f.store("p1", index.WorkerRank("p1", 0), storeOp(prompt[:12*bs], "", kvevents.TierDevice))
			},
			// p1 may still be p2's hint source (hints pair roles; these
			// test engines hash alike).
			want: want{prefill: "p2", decode: "d1", disagg: true, uncached: 64, prefillHinted: true}},
		{name: "a forced target serves the whole request whatever its role",
			workers: []Worker{role("p1", hints.TypePrefill, EngineSGLang), role("d1", hints.TypeDecode, EngineSGLang)},
			req:     Request{Target: "p1"},
			want:    want{decode: "p1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRouter(t, nil)
			f := newFleet(t, r, tc.workers...)
			if tc.setup != nil {
				tc.setup(f)
			}
			req := tc.req
			req.Model, req.Tokens = "m", prompt
			cfg := pd
			if tc.cfg != nil {
				cfg = *tc.cfg
				cfg.DecodePrefillScale = 0.25
			}
			p, err := r.Plan(req, cfg)
			if tc.want.err != nil || err != nil {
				if !errors.Is(err, tc.want.err) {
					t.Fatalf("err %v, want %v", err, tc.want.err)
				}
				return
			}
			got := want{decode: p.Decode.Target.Worker.ID, disagg: p.Disaggregated, skip: p.Skip, would: p.WouldSkip,
				uncached: p.DecodeUncached}
			if p.Prefill != nil {
				got.prefill = p.Prefill.Target.Worker.ID
				got.prefillHinted = p.Prefill.HintDecision.Hinted()
				if p.Decode.HintDecision.Hinted() {
					t.Fatalf("the decode leg of a two-leg plan is hinted: %+v", p.Decode.HintDecision)
				}
			}
			if got != tc.want {
				t.Fatalf("plan %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestLegFilters: Decide with a leg chooses only workers that serve it.
func TestLegFilters(t *testing.T) {
	r := newRouter(t, nil)
	newFleet(t, r, role("p", hints.TypePrefill, EngineSGLang), role("d", hints.TypeDecode, EngineVLLM), agg("a", 1))
	for _, tc := range []struct {
		leg  Leg
		want []string
	}{
		{LegPrefill, []string{"p"}},
		{LegDecode, []string{"d"}},
		{LegWhole, []string{"a", "d"}},
		{LegAny, []string{"a", "d", "p"}},
	} {
		d, err := r.Decide(Request{Model: "m", Tokens: tokens(1, 4), Leg: tc.leg, Explain: true})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, c := range d.Candidates {
			got = append(got, c.Worker)
		}
		if len(got) != len(tc.want) {
			t.Fatalf("%v: candidates %v, want %v", tc.leg, got, tc.want)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Fatalf("%v: candidates %v, want %v", tc.leg, got, tc.want)
			}
		}
	}
}

func TestPDConfigCheck(t *testing.T) {
	for _, c := range []PDConfig{{LocalPrefillTokens: -1}, {LocalPrefillFraction: 1.5}, {DecodePrefillScale: -1}} {
		if c.Check() == nil {
			t.Fatalf("%+v accepted", c)
		}
	}
	if err := DefaultPD().Check(); err != nil {
		t.Fatal(err)
	}
}
