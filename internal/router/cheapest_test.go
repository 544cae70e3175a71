package router

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"kvrouter/internal/index"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/schedule"
)

// TestCheapestMatchesFullList: the decision that prices ranks on the fly
// chooses exactly what pricing the full candidate list (as Explain does)
// chooses, ties included, on random fleets with shared prefixes, load,
// lower tiers, cache owners and block counts.
func TestCheapestMatchesFullList(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		r := newRouter(t, nil)
		f := newFleet(t, r)
		workers := 1 + rng.IntN(12)
		for w := range workers {
			f.add(agg(fmt.Sprint("w", w), 1+rng.IntN(3)))
		}
		prompts := make([][]uint32, 4)
		for i := range prompts {
			prompts[i] = tokens(uint32(i)<<16, 2+rng.IntN(8))
		}
		for _, w := range r.AllWorkers() {
			for rank := range w.DPSize {
				for range rng.IntN(3) {
					p := prompts[rng.IntN(len(prompts))]
					p = p[:bs*(1+rng.IntN(len(p)/bs))]
					tier := []kvevents.Tier{kvevents.TierDevice, kvevents.TierHost, kvevents.TierDisk}[rng.IntN(3)]
					f.store(w.ID, index.WorkerRank(w.ID, rank), storeOp(p, "", tier))
				}
				if rng.IntN(3) == 0 {
					p := prompts[rng.IntN(len(prompts))]
					f.store(w.ID, index.CacheOwner(w.Owners[rank]), storeOp(p, "", kvevents.TierExternal))
				}
				if rng.IntN(4) == 0 {
					r.Load().Start(fmt.Sprint(w.ID, rank), schedule.Rank{Worker: w.ID, DP: rank}, float64(rng.IntN(64)), float64(rng.IntN(4)))
				}
			}
		}
		if seed%2 == 0 {
			r.RefreshSizes()
		}
		for q := range 40 {
			p := append(append([]uint32(nil), prompts[q%len(prompts)]...), tokens(uint32(q+1)<<24, rng.IntN(3))...)
			if q%5 == 0 {
				p = tokens(uint32(q+7)<<20, 3) // matches nothing: all ranks tie
			}
			req := Request{Model: "m", Tokens: p}
			if q%7 == 0 && workers > 1 {
				req.Exclude = []string{"w0"}
			}
			fast, err := r.Decide(req)
			if err != nil {
				t.Fatal(err)
			}
			req.Explain = true
			full := decide(t, r, req)
			full.Candidates = nil
			if !reflect.DeepEqual(fast, full) {
				t.Fatalf("seed %d request %d:\n fast %+v\n full %+v", seed, q, fast, full)
			}
		}
	}
}
