package router

import (
	"slices"
	"testing"
	"time"

	"kvrouter/internal/cost"
	"kvrouter/internal/hints"
	"kvrouter/internal/index"
	"kvrouter/internal/kvevents"
)

// TestHints starts from a fleet where target a holds 2 device blocks of an
// 8-block prompt and b's runner holds 6 as runner-owned blocks, with b kept
// busy so that a is chosen; each case changes one thing.
func TestHints(t *testing.T) {
	prompt := tokens(500, 8)
	tests := []struct {
		name   string
		edit   func(f *fleet, req *Request)
		reason hints.Reason
		reach  int
	}{
		{name: "the longer runner-owned prefix is hinted", reason: hints.ReasonHinted, reach: 6},
		{name: "a peer rank's longer device prefix is hinted",
			edit: func(f *fleet, _ *Request) {
				f.store("b", index.WorkerRank("b", 0), storeOp(prompt[:7*bs], "", kvevents.TierDevice))
			},
			reason: hints.ReasonHinted, reach: 7},
		{name: "a peer's host tier is not a source",
			edit: func(f *fleet, _ *Request) {
				f.store("b", index.WorkerRank("b", 0), storeOp(prompt[:7*bs], "", kvevents.TierHost))
			},
			reason: hints.ReasonHinted, reach: 6},
		{name: "source not ready",
			edit: func(f *fleet, _ *Request) {
				f.sinks["b"].SetReady(index.CacheOwner("owner-b-0"), false)
			},
			reason: hints.ReasonNotReady, reach: 6},
		{name: "discovery watch lost",
			edit:   func(f *fleet, _ *Request) { f.r.SetDiscoveryLive(false) },
			reason: hints.ReasonNotReady, reach: 6},
		{name: "source of another worker type",
			edit: func(f *fleet, _ *Request) {
				b := agg("b", 1)
				b.Capability.Type = hints.TypePrefill
				if err := f.r.Upsert(b, t0); err != nil {
					f.t.Fatal(err)
				}
			},
			reason: hints.ReasonTypeMismatch, reach: 6},
		{name: "target without the capability",
			edit: func(f *fleet, _ *Request) {
				a := agg("a", 1)
				a.Capability, a.Refusal = hints.Capability{}, "refused"
				if err := f.r.Upsert(a, t0); err != nil {
					f.t.Fatal(err)
				}
			},
			reason: hints.ReasonNoCapability},
		{name: "another salt",
			edit:   func(_ *fleet, req *Request) { req.Salt = "tenant-b" },
			reason: hints.ReasonNoCandidate},
		{name: "a source that stored blocks of unknown salt is no source",
			// The runner's other blocks are under an identity no request
			// matches; the source's own salt, which the index records, is
			// what hint selection checks.
			edit: func(f *fleet, _ *Request) {
				op := storeOp(tokens(900, 2), "", kvevents.TierExternal)
				op.SaltUnknown = true
				f.store("b", index.CacheOwner("owner-b-0"), op)
			},
			reason: hints.ReasonSaltUnknown, reach: 6},
		{name: "removal events stop the hint",
			edit: func(f *fleet, _ *Request) {
				f.store("b", index.CacheOwner("owner-b-0"), index.Op{Kind: index.OpRemove, Tier: kvevents.TierExternal,
					Hashes: engineHashes(prompt[:6*bs], "")[2:]})
			},
			reason: hints.ReasonNotBeyondTarget},
		{name: "a source's reset stops the hint",
			edit: func(f *fleet, _ *Request) {
				f.sinks["b"].Reset(index.CacheOwner("owner-b-0"))
			},
			reason: hints.ReasonNoCandidate},
		{name: "engine hashes that disagree with the target's",
			edit: func(f *fleet, _ *Request) {
				op := storeOp(prompt[:2*bs], "", kvevents.TierDevice)
				op.Hashes = []uint64{1, 2}
				f.store("a", index.WorkerRank("a", 0), index.Op{Kind: index.OpClear, AllTiers: true})
				f.store("a", index.WorkerRank("a", 0), op)
			},
			reason: hints.ReasonConflict, reach: 6},
		{name: "the policy prefers recomputing",
			edit: func(f *fleet, _ *Request) {
				f.r.policies[bs] = hints.MinBlocks(5)
			},
			reason: hints.ReasonNotWorthPulling, reach: 6},
		{name: "a detached owner stays a source",
			edit: func(f *fleet, _ *Request) {
				f.r.Remove("b", t0)
				f.add(agg("c", 1)) // something to route to besides a
				f.r.Load().Start("busy-c", cost.Rank{Worker: "c", DP: 0}, 1e6, 0)
			},
			reason: hints.ReasonHinted, reach: 6},
		{name: "a detached owner expires",
			edit: func(f *fleet, _ *Request) {
				f.r.Remove("b", t0)
				f.r.Expire(t0.Add(time.Minute))
			},
			reason: hints.ReasonNoCandidate},
		{name: "approximate inventory is never a source",
			edit: func(f *fleet, _ *Request) {
				f.r.Remove("b", t0)
				f.r.Expire(t0.Add(time.Minute))
				x := Worker{ID: "x", Model: "m", URL: "http://x", Engine: EngineVLLM, BlockSize: bs, DPSize: 1, Mode: ModeApproximate,
					Capability: hints.Capability{CanConsume: true, Type: hints.TypeAggregated, Endpoints: map[int]string{0: "tcp://x:1"}}}
				if err := f.r.Upsert(x, t0); err != nil {
					f.t.Fatal(err)
				}
				d := decide(f.t, f.r, Request{Model: "m", Tokens: prompt, Target: "x"})
				f.r.Commit(d, t0)
				f.r.Load().Start("busy-x", cost.Rank{Worker: "x", DP: 0}, 1e6, 0)
			},
			reason: hints.ReasonSourceNotCapable, reach: 8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRouter(t, nil)
			f := newFleet(t, r, agg("a", 1), agg("b", 1))
			f.store("a", index.WorkerRank("a", 0), storeOp(prompt[:2*bs], "", kvevents.TierDevice))
			f.store("b", index.CacheOwner("owner-b-0"), storeOp(prompt[:6*bs], "", kvevents.TierExternal))
			r.Load().Start("busy-b", cost.Rank{Worker: "b", DP: 0}, 1e6, 0)
			req := Request{Model: "m", Tokens: prompt}
			if tc.edit != nil {
				tc.edit(f, &req)
			}
			d := decide(t, r, req)
			if d.Target.Worker.ID != "a" {
				t.Fatalf("target %s: hints must not move the target", target(d))
			}
			hd := d.HintDecision
			if hd.Reason != tc.reason || hd.Reach != tc.reach {
				t.Fatalf("hint decision %v reach %d, want %v reach %d (%+v)", hd.Reason, hd.Reach, tc.reason, tc.reach, hd)
			}
			if !hd.Hinted() {
				if d.Hint.Endpoint != "" || d.Hint.BlockHashes != nil {
					t.Fatalf("hint %+v without a hinted decision", d.Hint)
				}
				return
			}
			want := hints.Hint{Endpoint: "tcp://b:25000", BlockHashes: engineHashes(prompt[:tc.reach*bs], "")}
			if d.Hint.Endpoint != want.Endpoint || !slices.Equal(d.Hint.BlockHashes, want.BlockHashes) {
				t.Fatalf("hint %+v, want %+v", d.Hint, want)
			}
		})
	}
}

// TestHintOutlivesLaterDecisions: a decision's matches reuse memory from
// one decision to the next (index.Matches); a hint keeps its own hashes.
func TestHintOutlivesLaterDecisions(t *testing.T) {
	first, second := tokens(500, 8), tokens(900, 8)
	r := newRouter(t, nil)
	f := newFleet(t, r, agg("a", 1), agg("b", 1))
	for _, p := range [][]uint32{first, second} {
		f.store("a", index.WorkerRank("a", 0), storeOp(p[:2*bs], "", kvevents.TierDevice))
		f.store("b", index.CacheOwner("owner-b-0"), storeOp(p[:6*bs], "", kvevents.TierExternal))
	}
	r.Load().Start("busy-b", cost.Rank{Worker: "b", DP: 0}, 1e6, 0)
	d := decide(t, r, Request{Model: "m", Tokens: first})
	want := engineHashes(first[:6*bs], "")
	if !slices.Equal(d.Hint.BlockHashes, want) {
		t.Fatalf("hint %v, want %v", d.Hint.BlockHashes, want)
	}
	for range 4 {
		if later := decide(t, r, Request{Model: "m", Tokens: second}); !later.HintDecision.Hinted() {
			t.Fatalf("second prompt not hinted: %+v", later.HintDecision)
		}
	}
	if !slices.Equal(d.Hint.BlockHashes, want) {
		t.Fatalf("hint changed by later decisions: %v, want %v", d.Hint.BlockHashes, want)
	}
}

// TestHintsNeverMoveTheTarget: with and without hint-capable peers, the
// choice is the same.
func TestHintsNeverMoveTheTarget(t *testing.T) {
	prompt := tokens(1, 8)
	choose := func(capable bool) string {
		r := newRouter(t, nil)
		a, b := agg("a", 2), agg("b", 2)
		if !capable {
			a.Capability, b.Capability = hints.Capability{}, hints.Capability{}
		}
		f := newFleet(t, r, a, b)
		f.store("a", index.WorkerRank("a", 1), storeOp(prompt[:2*bs], "", kvevents.TierDevice))
		f.store("b", index.CacheOwner("owner-b-0"), storeOp(prompt[:8*bs], "", kvevents.TierExternal))
		return target(decide(t, r, Request{Model: "m", Tokens: prompt}))
	}
	if with, without := choose(true), choose(false); with != without {
		t.Fatalf("target %s with hints, %s without", with, without)
	}
}

// TestRoutingBaselinesAndHintsOff: the benchmark baselines choose without
// the cost, and a router without hints says so.
func TestRoutingBaselinesAndHintsOff(t *testing.T) {
	prompt := tokens(500, 8)
	setup := func(edit func(*Config)) *Router {
		r := newRouter(t, edit)
		f := newFleet(t, r, agg("a", 1), agg("b", 1))
		f.store("a", index.WorkerRank("a", 0), storeOp(prompt[:2*bs], "", kvevents.TierDevice))
		f.store("b", index.CacheOwner("owner-b-0"), storeOp(prompt[:6*bs], "", kvevents.TierExternal))
		return r
	}

	r := setup(func(c *Config) { c.NoHints, c.Policy = true, nil })
	d := decide(t, r, Request{Model: "m", Tokens: prompt})
	if d.HintDecision.Reason != hints.ReasonDisabled || d.Hint.Endpoint != "" {
		t.Fatalf("hints off: decision %+v hint %+v", d.HintDecision, d.Hint)
	}

	r = setup(func(c *Config) { c.Routing = cost.RoutingRoundRobin })
	var got []string
	for range 4 {
		got = append(got, target(decide(t, r, Request{Model: "m", Tokens: prompt})))
	}
	if got[0] == got[1] || got[0] != got[2] || got[1] != got[3] {
		t.Fatalf("round robin chose %v", got)
	}

	r = setup(func(c *Config) { c.Routing = cost.RoutingLeastLoaded })
	r.Load().Start("busy-b", cost.Rank{Worker: "b", DP: 0}, 10, 0)
	if d := decide(t, r, Request{Model: "m", Tokens: prompt}); d.Target.Worker.ID != "a" {
		t.Fatalf("least loaded chose %s, want the idle a", target(d))
	}
	r.Load().Start("busy-a1", cost.Rank{Worker: "a", DP: 0}, 10, 0)
	r.Load().Start("busy-a2", cost.Rank{Worker: "a", DP: 0}, 10, 0)
	if d := decide(t, r, Request{Model: "m", Tokens: prompt}); d.Target.Worker.ID != "b" {
		t.Fatalf("least loaded chose %s, want b (fewer requests, despite a's cache)", target(d))
	}

	if _, err := New(Config{Policy: func(int) (hints.Policy, error) { return hints.MinBlocks(1), nil }, Routing: "fastest"}); err == nil {
		t.Fatal("unknown routing accepted")
	}
}
