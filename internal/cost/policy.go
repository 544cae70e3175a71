// This file holds the choice among scored candidates: kv routing and the baselines.

package cost

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
)

// Routing names how a target is chosen. KV is kvrouter's own; the others
// are the baselines it is measured against, and what a fleet falls back to
// when cache awareness is not wanted.
type Routing string

const (
	RoutingKV          Routing = "kv"           // lowest cost (docs/wire.md §8)
	RoutingRoundRobin  Routing = "round-robin"  // each rank in turn
	RoutingRandom      Routing = "random"       // uniformly at random
	RoutingLeastLoaded Routing = "least-loaded" // fewest requests in flight
)

// ParseRouting reads a routing name; the underscore spellings are accepted
// too, as benchmark reports use them.
func ParseRouting(s string) (Routing, error) {
	switch Routing(s) {
	case RoutingKV, RoutingRoundRobin, RoutingRandom, RoutingLeastLoaded:
		return Routing(s), nil
	case "round_robin":
		return RoutingRoundRobin, nil
	case "least_loaded":
		return RoutingLeastLoaded, nil
	}
	return "", fmt.Errorf("routing %q: want kv, round-robin, random or least-loaded", s)
}

// Picker chooses among scored candidates by a Routing. It is safe for
// concurrent use; only round-robin keeps state (its turn counter).
type Picker struct {
	Routing     Routing
	Temperature float64
	turn        atomic.Uint64
}

// Pick returns the index of the chosen candidate, or -1 for none. rng
// breaks the kv policy's ties and drives its temperature; the baselines
// draw from their own sources so that replicas need not agree on them.
func (p *Picker) Pick(s []Scored, rng *rand.Rand) int {
	if len(s) == 0 {
		return -1
	}
	switch p.Routing {
	case RoutingRoundRobin:
		return int((p.turn.Add(1) - 1) % uint64(len(s)))
	case RoutingRandom:
		return rand.IntN(len(s))
	case RoutingLeastLoaded:
		best := []int{}
		for i, c := range s {
			if len(best) == 0 {
				best = append(best, i)
				continue
			}
			switch b := s[best[0]]; {
			case lighter(c.Candidate, b.Candidate):
				best = append(best[:0], i)
			case !lighter(b.Candidate, c.Candidate):
				best = append(best, i)
			}
		}
		return best[rand.IntN(len(best))]
	}
	return Choose(s, p.Temperature, rng)
}

// lighter orders ranks by requests in flight, then by the tokens they
// still have to prefill.
func lighter(a, b Candidate) bool {
	if a.ActiveRequests != b.ActiveRequests {
		return a.ActiveRequests < b.ActiveRequests
	}
	return a.ActivePrefillTokens < b.ActivePrefillTokens
}
