package router

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"kvrouter/internal/cost"
	"kvrouter/internal/index"
	"kvrouter/internal/kvevents"
)

// TestCheapestMatchesFullList: the decision that prices ranks on the fly
// chooses exactly what pricing the full candidate list (as Explain does)
// chooses, ties included, on random fleets with shared prefixes, load,
// lower tiers, cache owners and block counts.
func TestCheapestMatchesFullList(t *testing.T) {
	for seed := range uint64(60) {
		rng := rand.New(rand.NewPCG(seed, 1))
		r := newRouter(t, nil)
		f := newFleet(t, r)
		workers := 1 + rng.IntN(40)
		// Sparse fleets, where few ranks hold anything, take the warm
		// path; dense ones the walk over every rank.
		sparse := seed%2 == 1
		for w := range workers {
			f.add(agg(fmt.Sprint("w", w), 1+rng.IntN(3)))
		}
		prompts := make([][]uint32, 4)
		for i := range prompts {
			prompts[i] = tokens(uint32(i)<<16, 2+rng.IntN(8))
		}
		for _, w := range r.AllWorkers() {
			for rank := range w.DPSize {
				if sparse && rng.IntN(6) > 0 {
					continue
				}
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
					r.Load().Start(fmt.Sprint(w.ID, rank), cost.Rank{Worker: w.ID, DP: rank}, float64(rng.IntN(64)), float64(rng.IntN(4)))
				}
			}
		}
		if seed%3 == 0 && workers > 1 {
			// Two ranks naming the same cache owner: the second claim
			// wins the owner, the first still reads its blocks.
			w, _ := r.Worker("w1")
			w0, _ := r.Worker("w0")
			w.Owners = map[int]string{0: w0.Owners[0]}
			if err := r.Upsert(w, t0); err != nil {
				t.Fatal(err)
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

// TestCheapestWarmTiesCold: a rank whose cached blocks exactly offset its
// load costs what an idle empty rank costs, so the draw is among all of
// them, not among the ranks holding something.
func TestCheapestWarmTiesCold(t *testing.T) {
	r := newRouter(t, nil)
	f := newFleet(t, r)
	for w := range 6 {
		f.add(agg(fmt.Sprint("w", w), 1))
	}
	p := tokens(7, 4)
	f.store("w2", index.WorkerRank("w2", 0), storeOp(p[:2*bs], "", kvevents.TierDevice))
	// Two blocks of credit, two blocks of decode in flight: even.
	r.Load().Start("x", cost.Rank{Worker: "w2", DP: 0}, 0, 2)
	seen := map[string]bool{}
	for q := range 64 {
		req := Request{Model: "m", Tokens: append(append([]uint32(nil), p...), tokens(uint32(q+1)<<20, 1)...)}
		fast := decide(t, r, req)
		req.Explain = true
		full := decide(t, r, req)
		if target(fast) != target(full) {
			t.Fatalf("request %d: fast %s, full %s", q, target(fast), target(full))
		}
		seen[target(fast)] = true
	}
	if len(seen) < 3 {
		t.Fatalf("draws went to %v: want the tie spread over idle and warm ranks", seen)
	}
}

// TestDraw: draw picks the k-th tie in (entry, rank) order, whether the
// places fit its integer keys or not.
func TestDraw(t *testing.T) {
	for _, base := range []int{0, 1 << 22} { // the second overflows a key
		rng := rand.New(rand.NewPCG(uint64(base), 2))
		ents := make([]*entry, 30)
		for i := range ents {
			ents[i] = &entry{pos: base + i}
		}
		var ties []tie
		for _, e := range ents {
			for i := range rng.IntN(4) {
				ties = append(ties, tie{e: e, i: i})
			}
		}
		want := slices.Clone(ties)
		rng.Shuffle(len(ties), func(a, b int) { ties[a], ties[b] = ties[b], ties[a] })
		var ld loads
		for k := range want {
			if got := ld.draw(slices.Clone(ties), k); got != want[k] {
				t.Fatalf("base %d: draw %d = %+v, want %+v", base, k, got, want[k])
			}
		}
	}
}
