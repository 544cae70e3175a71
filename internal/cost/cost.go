// Package cost is the routing cost: what sending a request to each (worker,
// dp_rank) costs given its cache overlap and load (docs/wire.md §8), the choice among
// them, and the in-flight load it weighs. It is pure: callers supply
// overlaps, loads and a random source.
package cost

import (
	"math"
	"math/rand/v2"
	"slices"
)

// Weights are the cost formula's knobs.
type Weights struct {
	// OverlapCredit is how much a device-cached block is worth against a
	// block to prefill (Dynamo's kv-overlap-score-weight); 0 ignores caches.
	OverlapCredit float64
	// HostCredit and DiskCredit discount blocks restorable from lower tiers.
	HostCredit float64
	DiskCredit float64
	// PrefillLoadScale weighs prefill work against decode occupancy.
	PrefillLoadScale float64
	// RequestWeight prices each request already in flight on the rank.
	RequestWeight float64
}

// DefaultWeights are Dynamo's defaults, the reference to beat.
func DefaultWeights() Weights {
	return Weights{OverlapCredit: 1, HostCredit: 0.75, DiskCredit: 0.25, PrefillLoadScale: 1, RequestWeight: 0}
}

// Candidate is one (worker, dp_rank) the request could go to.
type Candidate struct {
	Worker string
	Rank   int
	// Overlaps, in blocks, of the request's prefix with what the rank holds:
	// the device prefix, then continuation on host and disk tiers.
	DeviceOverlap int
	HostOverlap   int
	DiskOverlap   int
	// SharedBeyond is extra credit for blocks the rank can obtain beyond its
	// own prefix without recomputing (zero unless the caller opts in: hints
	// must not change the choice by default).
	SharedBeyond float64
	// Load.
	ActiveDecodeBlocks  float64
	ActivePrefillTokens float64
	ActiveRequests      int
	// TreeSize breaks ties: the smaller cache is the better home for new
	// blocks.
	TreeSize int
}

// Scored is a candidate with its cost terms.
type Scored struct {
	Candidate
	PrefillBlocks         float64
	AdjustedPrefill       float64
	PotentialDecodeBlocks float64
	Cost                  float64
}

// Score prices every candidate for a request of requestBlocks blocks.
// blockSize converts in-flight prefill tokens into blocks of pending work.
func Score(w Weights, requestBlocks int, blockSize int, cands []Candidate) []Scored {
	return AppendScores(make([]Scored, 0, len(cands)), w, requestBlocks, blockSize, cands)
}

// AppendScores is Score appending to dst, so that a caller pricing a
// thousand ranks per request reuses the memory.
func AppendScores(dst []Scored, w Weights, requestBlocks int, blockSize int, cands []Candidate) []Scored {
	base := len(dst)
	dst = slices.Grow(dst, len(cands))[:base+len(cands)]
	out := dst[base:]
	for i, c := range cands {
		out[i] = w.Price(requestBlocks, blockSize, c)
	}
	return dst
}

// Price prices one candidate as Score does.
func (w Weights) Price(requestBlocks int, blockSize int, c Candidate) Scored {
	adj, decode, cost := w.terms(requestBlocks, blockSize, &c)
	return Scored{
		Candidate:             c,
		PrefillBlocks:         float64(requestBlocks),
		AdjustedPrefill:       adj,
		PotentialDecodeBlocks: decode,
		Cost:                  cost,
	}
}

// Cost is Price(...).Cost without copying the candidate around: a caller
// that only keeps the cheapest of a thousand ranks prices each in place.
func (w Weights) Cost(requestBlocks int, blockSize int, c *Candidate) float64 {
	_, _, cost := w.terms(requestBlocks, blockSize, c)
	return cost
}

// Floor is the least Cost of any unloaded candidate whose overlaps add up
// to at most depth blocks: every one of them credited at the best tier's
// rate. It lets a caller who has found a candidate cheaper than Floor(d)
// skip every unloaded candidate holding d blocks or fewer unpriced. ok is
// false when a weight is negative (or NaN), which would break the bound.
func (w Weights) Floor(requestBlocks, depth int) (floor float64, ok bool) {
	for _, v := range [...]float64{w.OverlapCredit, w.HostCredit, w.DiskCredit, w.PrefillLoadScale, w.RequestWeight} {
		if !(v >= 0) {
			return 0, false
		}
	}
	rb := float64(requestBlocks)
	best := max(w.OverlapCredit, w.HostCredit, w.DiskCredit)
	return w.PrefillLoadScale*math.Max(0, rb-best*float64(depth)) + rb, true
}

// terms computes the cost formula (docs/wire.md §8.1), for Price and Cost alike.
func (w Weights) terms(requestBlocks int, blockSize int, c *Candidate) (adj, decode, cost float64) {
	rb := float64(requestBlocks)
	adj = rb - w.OverlapCredit*float64(c.DeviceOverlap) - w.HostCredit*float64(c.HostOverlap) -
		w.DiskCredit*float64(c.DiskOverlap) - c.SharedBeyond
	adj = math.Max(0, adj)
	// Queued prefill on the rank delays this one: count it as prefill
	// work ahead of us.
	queued := 0.0
	if blockSize > 0 {
		queued = c.ActivePrefillTokens / float64(blockSize)
	}
	decode = c.ActiveDecodeBlocks + rb
	return adj, decode, w.PrefillLoadScale*(adj+queued) + decode + w.RequestWeight*float64(c.ActiveRequests)
}

// Choose returns the index of the chosen candidate, or -1 when there is
// none. Temperature 0 takes the cheapest (ties: smaller tree, then random);
// T > 0 samples with p ∝ exp(-(c-min)/((max-min)·T)).
func Choose(s []Scored, temperature float64, rng *rand.Rand) int {
	if len(s) == 0 {
		return -1
	}
	lo, hi := s[0].Cost, s[0].Cost
	for _, c := range s[1:] {
		lo, hi = math.Min(lo, c.Cost), math.Max(hi, c.Cost)
	}
	if temperature > 0 && hi > lo {
		total := 0.0
		p := make([]float64, len(s))
		for i, c := range s {
			p[i] = math.Exp(-(c.Cost - lo) / ((hi - lo) * temperature))
			total += p[i]
		}
		r := rng.Float64() * total
		for i := range p {
			r -= p[i]
			if r < 0 {
				return i
			}
		}
		return len(s) - 1
	}
	best := []int{}
	bestTree := math.MaxInt
	for i, c := range s {
		if c.Cost != lo {
			continue
		}
		switch {
		case c.TreeSize < bestTree:
			best, bestTree = append(best[:0], i), c.TreeSize
		case c.TreeSize == bestTree:
			best = append(best, i)
		}
	}
	if len(best) == 1 {
		return best[0]
	}
	return best[rng.IntN(len(best))]
}
