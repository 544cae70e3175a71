package router

import (
	"fmt"
	"testing"
	"time"

	"kvrouter/internal/index"
	"kvrouter/internal/kvevents"
)

// TestLinksSurviveChurn: after workers leave and come, sources are reset
// (the index renumbers them) and slots are reused, a router that decided
// all along decides as one built fresh on the final state.
func TestLinksSurviveChurn(t *testing.T) {
	prompts := [][]uint32{tokens(100, 8), tokens(500, 8), tokens(900, 8)}
	final := func(f *fleet) {
		f.store("b", index.WorkerRank("b", 0), storeOp(prompts[0][:6*bs], "", kvevents.TierDevice))
		f.store("b", index.CacheOwner("owner-b-1"), storeOp(prompts[1][:7*bs], "", kvevents.TierExternal))
		f.store("c", index.WorkerRank("c", 0), storeOp(prompts[1][:2*bs], "", kvevents.TierDevice))
		f.store("d", index.WorkerRank("d", 1), storeOp(prompts[2][:5*bs], "", kvevents.TierDevice))
		f.store("d", index.CacheOwner("owner-d-0"), storeOp(prompts[0][:8*bs], "", kvevents.TierExternal))
	}
	describe := func(r *Router) string {
		out := ""
		for _, p := range prompts {
			d := decide(t, r, Request{Model: "m", Tokens: p})
			out += fmt.Sprintf("%s overlap %d hint %v %s %d; ", target(d), d.Overlap, d.HintDecision.Hinted(), d.Hint.Endpoint, len(d.Hint.BlockHashes))
		}
		return out
	}

	r := newRouter(t, nil)
	f := newFleet(t, r, agg("a", 2), agg("b", 2), agg("c", 1))
	for i, w := range []string{"a", "b", "c"} {
		for _, p := range prompts {
			f.store(w, index.WorkerRank(w, 0), storeOp(p[:(i+2)*bs], "", kvevents.TierDevice))
			f.store(w, index.CacheOwner("owner-"+w+"-0"), storeOp(p[:(i+3)*bs], "", kvevents.TierExternal))
		}
	}
	describe(r) // fills the caches
	r.Remove("a", t0)
	r.Expire(t0.Add(2 * time.Minute)) // a's cache owners detached; now gone
	describe(r)                       // b's and c's numbers cached
	for w, srcs := range map[string][]index.Source{
		"b": {index.WorkerRank("b", 0), index.CacheOwner("owner-b-0")},
		"c": {index.WorkerRank("c", 0), index.CacheOwner("owner-c-0")},
	} {
		for _, src := range srcs {
			f.sinks[w].Reset(src) // as after a gap: emptied, then in step again
			f.sinks[w].SetReady(src, true)
		}
	}
	f.add(agg("d", 2))
	describe(r)
	final(f)
	got := describe(r)

	fresh := newRouter(t, nil)
	ff := newFleet(t, fresh, agg("b", 2), agg("c", 1), agg("d", 2))
	final(ff)
	if want := describe(fresh); got != want {
		t.Fatalf("after churn:\n%s\nfresh:\n%s", got, want)
	}
}
