package hints

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"kvrouter/internal/index"
)

// randomRequest draws a fleet where every rule of Select has a chance to
// fire: mixed types, readiness, conflicts, unknown salts and truncation.
func randomRequest(r *rand.Rand) (Request, map[index.Source]Meta) {
	pool := []index.Source{target, w1r1, w2, w3, p1, ownerA, ownerB}
	metas := fleet()
	for _, s := range pool[1:] {
		m := metas[s]
		m.Ready = r.IntN(6) > 0
		m.CanConsume = r.IntN(8) > 0
		m.Detached = r.IntN(6) == 0
		metas[s] = m
	}
	full := chain(12)
	req := Request{Target: target, TargetMeta: metas[target], PrefixToBeat: r.IntN(5), Chain: full[:4+r.IntN(9)]}
	for _, i := range r.Perm(len(pool))[:r.IntN(len(pool)+1)] {
		c := Candidate{Source: pool[i], Depth: r.IntN(13)}
		c.Chain = full[:c.Depth]
		if r.IntN(6) == 0 {
			c.Chain = c.Chain[:r.IntN(c.Depth+1)]
		}
		c.HashConflict = r.IntN(10) == 0
		c.SaltKnown = r.IntN(10) > 0
		req.Candidates = append(req.Candidates, c)
	}
	req.Meta = func(s index.Source) (Meta, bool) { m, ok := metas[s]; return m, ok }
	return req, metas
}

// reference is Select's winner rule written the slow, obvious way: list
// every eligible prefix, sort, take the first.
func reference(req Request) (index.Source, int, bool) {
	type option struct {
		src index.Source
		end int
	}
	beat := max(req.PrefixToBeat, 0)
	var prefixes []option
	for i := range req.Candidates {
		c := &req.Candidates[i]
		if eligible(req, c) == ReasonHinted && c.Depth > beat {
			prefixes = append(prefixes, option{c.Source, c.Depth})
		}
	}
	if len(prefixes) == 0 {
		return index.Source{}, 0, false
	}
	slices.SortFunc(prefixes, func(a, b option) int {
		if a.end != b.end {
			return b.end - a.end
		}
		return a.src.Compare(b.src)
	})
	return prefixes[0].src, prefixes[0].end, true
}

func TestSelectMatchesReferenceInAnyOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	n := 4000
	if testing.Short() {
		n = 500
	}
	hinted := 0
	for i := range n {
		req, _ := randomRequest(r)
		h, d := Select(req, MinBlocks(1))
		if d.Hinted() {
			hinted++
		}
		src, end, won := reference(req)
		// Reasons from ReasonChainTruncated on refuse a chosen winner.
		if chosen := d.Reason == ReasonHinted || d.Reason >= ReasonChainTruncated; won != chosen {
			t.Fatalf("case %d: reference won=%v, Select %+v\n%+v", i, won, d, req.Candidates)
		}
		if won && (d.Source != src || d.Reach != end) {
			t.Fatalf("case %d: reference picks %v reaching %d, Select %+v\n%+v", i, src, end, d, req.Candidates)
		}
		for range 3 {
			shuffled := req
			shuffled.Candidates = slices.Clone(req.Candidates)
			r.Shuffle(len(shuffled.Candidates), func(a, b int) {
				shuffled.Candidates[a], shuffled.Candidates[b] = shuffled.Candidates[b], shuffled.Candidates[a]
			})
			h2, d2 := Select(shuffled, MinBlocks(1))
			if !reflect.DeepEqual(h, h2) || !reflect.DeepEqual(d, d2) {
				t.Fatalf("case %d: order changes the outcome: %+v %+v vs %+v %+v", i, h, d, h2, d2)
			}
		}
	}
	if hinted < n/10 || hinted > n*9/10 {
		t.Fatalf("%d of %d random requests hinted: the generator no longer exercises both sides", hinted, n)
	}
}
