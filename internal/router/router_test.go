package router

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"kvrouter/internal/cost"
	"kvrouter/internal/hints"
	"kvrouter/internal/index"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvhash"
)

const bs = 4

var t0 = time.Unix(1_700_000_000, 0)

// tokens returns n blocks of a prompt; base keeps prompts apart.
func tokens(base uint32, blocks int) []uint32 {
	out := make([]uint32, blocks*bs)
	for i := range out {
		out[i] = base + uint32(i)
	}
	return out
}

// engineHashes stands for the engine's own block hashes: peers with the same
// hash seed agree on them, so they are a function of the prefix.
func engineHashes(toks []uint32, salt string) []uint64 {
	seqs := kvhash.SequenceHashes(kvhash.LocalHashes(toks, bs, kvhash.SeedFor("", salt)))
	for i := range seqs {
		seqs[i] ^= 0x5bd1e995
	}
	return seqs
}

func storeOp(toks []uint32, salt string, tier kvevents.Tier) index.Op {
	return index.Op{Kind: index.OpStore, Tier: tier, Hashes: engineHashes(toks, salt),
		Local: kvhash.LocalHashes(toks, bs, kvhash.SeedFor("", salt)), BlockSize: bs}
}

func newRouter(t testing.TB, edit func(*Config)) *Router {
	t.Helper()
	cfg := Config{
		Weights:          cost.DefaultWeights(),
		Policy:           func(int) (hints.Policy, error) { return hints.MinBlocks(1), nil },
		ApproxTTL:        time.Minute,
		DetachedOwnerTTL: time.Minute,
	}
	if edit != nil {
		edit(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// agg is a hint-capable aggregated worker registered by an agent, with one
// cache owner per rank.
func agg(id string, ranks int) Worker {
	w := Worker{ID: id, Model: "m", URL: "http://" + id, Engine: EngineSGLang, BlockSize: bs, DPSize: ranks,
		Origin: OriginDiscovery, Placement: hints.PlaceSGLang, Owners: map[int]string{},
		Capability: hints.Capability{CanConsume: true, Type: hints.TypeAggregated, Endpoints: map[int]string{}}}
	for r := range ranks {
		w.Capability.Endpoints[r] = fmt.Sprintf("tcp://%s:%d", id, 25000+r)
		w.Owners[r] = fmt.Sprintf("owner-%s-%d", id, r)
	}
	return w
}

type fleet struct {
	t     testing.TB
	r     *Router
	sinks map[string]*Sink
}

func newFleet(t testing.TB, r *Router, ws ...Worker) *fleet {
	t.Helper()
	f := &fleet{t: t, r: r, sinks: map[string]*Sink{}}
	for _, w := range ws {
		f.add(w)
	}
	return f
}

func (f *fleet) add(w Worker) {
	f.t.Helper()
	if err := f.r.Upsert(w, t0); err != nil {
		f.t.Fatal(err)
	}
	s, err := f.r.Sink(w.ID)
	if err != nil {
		f.t.Fatal(err)
	}
	f.sinks[w.ID] = s
	for rank := w.DPStart; rank < w.DPStart+w.DPSize; rank++ {
		s.SetReady(index.WorkerRank(w.ID, rank), true)
		if o, ok := w.Owners[rank]; ok {
			s.SetReady(index.CacheOwner(o), true)
		}
	}
}

func (f *fleet) store(worker string, src index.Source, op index.Op) {
	f.t.Helper()
	if err := f.sinks[worker].Apply(src, []index.Op{op}); err != nil {
		f.t.Fatal(err)
	}
}

func decide(t testing.TB, r *Router, req Request) *Decision {
	t.Helper()
	d, err := r.Decide(req)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func target(d *Decision) string { return fmt.Sprintf("%s/%d", d.Target.Worker.ID, d.Target.Rank) }

func TestRouting(t *testing.T) {
	prompt := tokens(100, 8)
	tests := []struct {
		name  string
		setup func(f *fleet)
		req   Request
		want  string // "" with not: anything else
		not   string
	}{
		{name: "longest device prefix wins",
			setup: func(f *fleet) {
				f.store("a", index.WorkerRank("a", 0), storeOp(prompt[:2*bs], "", kvevents.TierDevice))
				f.store("b", index.WorkerRank("b", 0), storeOp(prompt[:6*bs], "", kvevents.TierDevice))
			},
			want: "b/0"},
		{name: "the second rank of a worker is a candidate of its own",
			setup: func(f *fleet) {
				f.store("c", index.WorkerRank("c", 1), storeOp(prompt[:3*bs], "", kvevents.TierDevice))
			},
			want: "c/1"},
		{name: "load breaks affinity",
			setup: func(f *fleet) {
				f.store("b", index.WorkerRank("b", 0), storeOp(prompt[:6*bs], "", kvevents.TierDevice))
				for i := range 3 {
					f.r.Load().Start(fmt.Sprint("busy", i), cost.Rank{Worker: "b", DP: 0}, 2000, 50)
				}
			},
			not: "b/0"},
		{name: "engine-reported load counts too",
			setup: func(f *fleet) {
				f.store("b", index.WorkerRank("b", 0), storeOp(prompt[:6*bs], "", kvevents.TierDevice))
				f.r.SetEngineLoad("b", 0, EngineLoad{KVUsage: 0.5, KVUsedBlocks: 500})
			},
			not: "b/0"},
		{name: "host tier counts less than device",
			setup: func(f *fleet) {
				f.store("a", index.WorkerRank("a", 0), storeOp(prompt[:4*bs], "", kvevents.TierDevice))
				f.store("b", index.WorkerRank("b", 0), storeOp(prompt[:5*bs], "", kvevents.TierHost))
			},
			want: "a/0"},
		{name: "a rank's own runner-owned blocks extend its overlap",
			setup: func(f *fleet) {
				f.store("a", index.WorkerRank("a", 0), storeOp(prompt[:2*bs], "", kvevents.TierDevice))
				f.store("b", index.WorkerRank("b", 0), storeOp(prompt[:1*bs], "", kvevents.TierDevice))
				f.store("b", index.CacheOwner("owner-b-0"), storeOp(prompt[:8*bs], "", kvevents.TierExternal))
			},
			want: "b/0"},
		{name: "another salt matches nothing",
			setup: func(f *fleet) {
				f.store("b", index.WorkerRank("b", 0), storeOp(prompt[:6*bs], "tenant-a", kvevents.TierDevice))
				f.store("a", index.WorkerRank("a", 0), storeOp(prompt[:1*bs], "tenant-b", kvevents.TierDevice))
			},
			req:  Request{Salt: "tenant-b"},
			want: "a/0"},
		{name: "excluded workers are skipped",
			setup: func(f *fleet) {
				f.store("b", index.WorkerRank("b", 0), storeOp(prompt[:6*bs], "", kvevents.TierDevice))
			},
			req: Request{Exclude: []string{"b"}},
			not: "b/0",
		},
		{name: "a forced target takes its cheapest rank",
			setup: func(f *fleet) {
				f.store("b", index.WorkerRank("b", 0), storeOp(prompt[:6*bs], "", kvevents.TierDevice))
				f.store("c", index.WorkerRank("c", 1), storeOp(prompt[:2*bs], "", kvevents.TierDevice))
			},
			req:  Request{Target: "c"},
			want: "c/1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRouter(t, nil)
			f := newFleet(t, r, agg("a", 1), agg("b", 1), agg("c", 2))
			tc.setup(f)
			req := tc.req
			req.Model, req.Tokens, req.Explain = "m", prompt, true
			d := decide(t, r, req)
			switch {
			case tc.not != "" && target(d) == tc.not:
				t.Fatalf("chose %s; candidates %+v", tc.not, d.Candidates)
			case tc.want != "" && target(d) != tc.want:
				t.Fatalf("target %s, want %s; candidates %+v", target(d), tc.want, d.Candidates)
			}
			if d.Blocks != 8 || d.Tokens != len(prompt) || len(d.Candidates) != 4-len(req.Exclude) && req.Target == "" {
				t.Fatalf("blocks %d tokens %d candidates %d", d.Blocks, d.Tokens, len(d.Candidates))
			}
		})
	}
}

func TestCandidateTerms(t *testing.T) {
	r := newRouter(t, nil)
	prompt := tokens(1, 10)
	f := newFleet(t, r, agg("a", 1))
	f.store("a", index.WorkerRank("a", 0), storeOp(prompt[:3*bs], "", kvevents.TierDevice))
	op := storeOp(prompt[:5*bs], "", kvevents.TierHost)
	op.Hashes, op.Local, op.Parent, op.HasParent = op.Hashes[3:], op.Local[3:], op.Hashes[2], true
	f.store("a", index.WorkerRank("a", 0), op)
	f.store("a", index.CacheOwner("owner-a-0"), storeOp(prompt[:7*bs], "", kvevents.TierExternal))
	r.Load().Start("x", cost.Rank{Worker: "a", DP: 0}, 40, 3)
	d := decide(t, r, Request{Model: "m", Tokens: prompt, Explain: true})
	c := d.Candidates[0]
	if d.Chosen != c {
		t.Fatalf("chosen %+v, candidate %+v", d.Chosen, c)
	}
	// 3 on the device, 2 on the host, 2 more restored by the rank's runner.
	want := Candidate{Worker: "a", Rank: 0, OverlapBlocks: 7, DeviceOverlap: 3, HostOverlap: 4,
		AdjustedPrefill: 10 - 3 - 0.75*4, PotentialDecodeBlocks: 3 + 10, ActiveRequests: 1}
	want.Cost = want.AdjustedPrefill + 40.0/bs + want.PotentialDecodeBlocks
	if c != want {
		t.Fatalf("candidate\n got %+v\nwant %+v", c, want)
	}
	if d.Overlap != 7 || d.Blocks != 10 {
		t.Fatalf("overlap %d of %d", d.Overlap, d.Blocks)
	}
}

func TestUnknownModel(t *testing.T) {
	r := newRouter(t, nil)
	newFleet(t, r, agg("a", 1))
	_, err := r.Decide(Request{Model: "nope", Tokens: tokens(1, 1)})
	var me *ModelError
	if !errors.As(err, &me) || !errors.Is(err, ErrUnknownModel) || !slices.Equal(me.Served, []string{"m"}) {
		t.Fatalf("err = %v", err)
	}
	if _, err := r.Decide(Request{Model: "m", Tokens: tokens(1, 1), Target: "ghost"}); !errors.Is(err, ErrNoWorker) {
		t.Fatalf("forced unknown target: %v", err)
	}
}

// TestUnknownModelPendingDiscovery: a router whose discovery watch was
// never in step cannot tell an unknown model from one whose workers it has
// not read yet; once in step, losing the watch again does not make every
// unknown model pending.
func TestUnknownModelPendingDiscovery(t *testing.T) {
	r := newRouter(t, nil)
	pending := func() bool {
		var me *ModelError
		if err := r.CheckModel("nope"); !errors.As(err, &me) {
			t.Fatalf("CheckModel = %v", err)
		}
		_, err := r.Decide(Request{Model: "nope", Tokens: tokens(1, 1)})
		var de *ModelError
		if !errors.As(err, &de) || de.Pending != me.Pending {
			t.Fatalf("Decide = %v, CheckModel pending %v", err, me.Pending)
		}
		return me.Pending
	}
	steps := []struct {
		live    *bool
		pending bool
	}{
		{nil, false}, // no discovery at all: a plain unknown model
		{ptr(false), true},
		{ptr(false), true},
		{ptr(true), false},
		{ptr(false), false},
	}
	for i, s := range steps {
		if s.live != nil {
			r.SetDiscoveryLive(*s.live)
		}
		if got := pending(); got != s.pending {
			t.Fatalf("step %d: pending = %v, want %v", i, got, s.pending)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// TestTieBreakIsContentSeeded: two routers with the same view break ties
// the same way for identical requests, yet spread different requests.
func TestTieBreakIsContentSeeded(t *testing.T) {
	var ws []Worker
	for i := range 8 {
		ws = append(ws, agg(fmt.Sprint("w", i), 1))
	}
	r1, r2 := newRouter(t, nil), newRouter(t, nil)
	newFleet(t, r1, ws...)
	newFleet(t, r2, ws...)
	seen := map[string]bool{}
	for i := range 40 {
		req := Request{Model: "m", Tokens: tokens(uint32(1000*i), 3)}
		a, b := decide(t, r1, req), decide(t, r2, req)
		if target(a) != target(b) {
			t.Fatalf("request %d: %s vs %s", i, target(a), target(b))
		}
		if again := decide(t, r1, req); target(again) != target(a) {
			t.Fatalf("request %d: not stable", i)
		}
		seen[target(a)] = true
	}
	if len(seen) < 3 {
		t.Fatalf("ties always broken towards %v", seen)
	}
	short := Request{Model: "m", Tokens: []uint32{7, 8}}
	if target(decide(t, r1, short)) != target(decide(t, r2, short)) {
		t.Fatal("sub-block request: replicas disagree")
	}
}

func TestMixedBlockSizes(t *testing.T) {
	r := newRouter(t, nil)
	big := agg("big", 1)
	big.BlockSize = 2 * bs
	f := newFleet(t, r, agg("small", 1), big)
	prompt := tokens(1, 8)
	op := index.Op{Kind: index.OpStore, Tier: kvevents.TierDevice, Hashes: []uint64{1, 2, 3},
		Local: kvhash.LocalHashes(prompt[:6*bs], 2*bs, kvhash.Seed), BlockSize: 2 * bs}
	f.store("big", index.WorkerRank("big", 0), op)
	d := decide(t, r, Request{Model: "m", Tokens: prompt})
	if target(d) != "big/0" || d.Blocks != 4 || d.Overlap != 3 {
		t.Fatalf("target %s blocks %d overlap %d", target(d), d.Blocks, d.Overlap)
	}
	// A store with another block size than registered is refused.
	if err := f.sinks["small"].Apply(index.WorkerRank("small", 0), []index.Op{op}); !errors.Is(err, index.ErrBlockSize) {
		t.Fatalf("block size mismatch: %v", err)
	}
}

func TestStaleSinkChangesNothing(t *testing.T) {
	r := newRouter(t, nil)
	f := newFleet(t, r, agg("a", 1))
	old := f.sinks["a"]
	f.add(agg("a", 1)) // a new agent incarnation: a new sink
	prompt := tokens(1, 2)
	if err := old.Apply(index.WorkerRank("a", 0), []index.Op{storeOp(prompt, "", kvevents.TierDevice)}); err != nil {
		t.Fatal(err)
	}
	if d := decide(t, r, Request{Model: "m", Tokens: prompt}); d.Overlap != 0 {
		t.Fatalf("stale sink's store applied: overlap %d", d.Overlap)
	}
	r.Remove("a", t0)
	if err := f.sinks["a"].Apply(index.WorkerRank("a", 0), []index.Op{storeOp(prompt, "", kvevents.TierDevice)}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Decide(Request{Model: "m", Tokens: prompt}); !errors.Is(err, ErrUnknownModel) {
		t.Fatalf("removed worker resurrected: %v", err)
	}
}

func TestApproximateMode(t *testing.T) {
	r := newRouter(t, nil)
	for _, id := range []string{"a", "b", "c"} {
		w := Worker{ID: id, Model: "m", URL: "http://" + id, Engine: EngineVLLM, BlockSize: bs, DPSize: 1, Mode: ModeApproximate,
			Capability: hints.Capability{CanConsume: true, Type: hints.TypeAggregated}}
		if err := r.Upsert(w, t0); err != nil {
			t.Fatal(err)
		}
	}
	prompt := tokens(1, 6)
	first := decide(t, r, Request{Model: "m", Tokens: prompt})
	if first.Overlap != 0 {
		t.Fatalf("overlap before any decision: %d", first.Overlap)
	}
	// Decide alone records nothing.
	if d := decide(t, r, Request{Model: "m", Tokens: prompt}); d.Overlap != 0 {
		t.Fatal("an uncommitted decision was recorded")
	}
	r.Commit(first, t0)
	// A request sharing the prefix follows it, and gets no hint however
	// much another approximate worker holds.
	other := append(slices.Clone(prompt[:4*bs]), tokens(900, 2)...)
	d := decide(t, r, Request{Model: "m", Tokens: other})
	if d.Target.Worker.ID != first.Target.Worker.ID || d.Overlap != 4 {
		t.Fatalf("second request: %s overlap %d, want %s overlap 4", target(d), d.Overlap, target(first))
	}
	forced := decide(t, r, Request{Model: "m", Tokens: prompt, Target: otherThan(first.Target.Worker.ID)})
	if forced.HintDecision.Hinted() || forced.HintDecision.Reason != hints.ReasonNoCapability {
		t.Fatalf("approximate inventory produced hint decision %v", forced.HintDecision.Reason)
	}
	r.Expire(t0.Add(59 * time.Second))
	if d := decide(t, r, Request{Model: "m", Tokens: prompt}); d.Overlap != 6 {
		t.Fatalf("expired early: overlap %d", d.Overlap)
	}
	r.Expire(t0.Add(time.Minute))
	if d := decide(t, r, Request{Model: "m", Tokens: prompt}); d.Overlap != 0 {
		t.Fatalf("not expired: overlap %d", d.Overlap)
	}
}

func otherThan(id string) string {
	if id == "a" {
		return "b"
	}
	return "a"
}

func TestStats(t *testing.T) {
	r := newRouter(t, nil)
	f := newFleet(t, r, agg("a", 2))
	if err := r.Upsert(Worker{ID: "x", Model: "m", URL: "http://x", Engine: EngineVLLM, BlockSize: bs, DPSize: 1, Mode: ModeApproximate}, t0); err != nil {
		t.Fatal(err)
	}
	f.store("a", index.WorkerRank("a", 0), storeOp(tokens(1, 3), "", kvevents.TierDevice))
	f.store("a", index.CacheOwner("owner-a-1"), storeOp(tokens(1, 2), "", kvevents.TierExternal))
	f.sinks["a"].SetReady(index.WorkerRank("a", 1), false)
	r.RefreshSizes()
	st := r.Stats()
	if st.WorkersByMode[ModeEvents] != 1 || st.WorkersByMode[ModeApproximate] != 1 || st.Sources != 4 || st.NotReady != 1 ||
		st.BlocksByTier[kvevents.TierDevice] != 3 || st.BlocksByTier[kvevents.TierExternal] != 2 {
		t.Fatalf("stats %+v", st)
	}
	r.SetDiscoveryLive(false)
	if st := r.Stats(); st.NotReady != 4 || st.DiscoveryLive {
		t.Fatalf("watch lost: %+v", st)
	}
	ws, detached := r.View()
	if len(ws) != 2 || ws[0].ID != "a" || len(ws[0].Ranks) != 2 || ws[0].Ranks[0].Blocks[kvevents.TierDevice] != 3 ||
		len(ws[0].Owners) != 2 || ws[0].Owners[1].Blocks[kvevents.TierExternal] != 2 || len(detached) != 0 {
		t.Fatalf("view %+v", ws)
	}
	r.Remove("a", t0)
	if _, detached := r.View(); len(detached) != 2 || !detached[0].Detached || !detached[0].ExpiresAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("detached %+v", detached)
	}
}

// TestUpsertAllOrNothing: a registration that cannot be taken in full
// (its cache owner is bound to another model's index) leaves no trace.
func TestUpsertAllOrNothing(t *testing.T) {
	r := newRouter(t, nil)
	newFleet(t, r, agg("a", 1))
	b := agg("b", 2)
	b.Model = "other"
	b.Owners[1] = "owner-a-0" // a's owner, registered under model m
	if err := r.Upsert(b, t0); !errors.Is(err, index.ErrSource) {
		t.Fatalf("err = %v, want index.ErrSource", err)
	}
	if _, ok := r.Worker("b"); ok || slices.Contains(r.Models(), "other") {
		t.Fatal("half-registered worker kept")
	}
	ws, _ := r.View()
	if len(ws) != 1 || len(ws[0].Owners) != 1 {
		t.Fatalf("a's view changed: %+v", ws)
	}
}
