package cost

import (
	"math/rand/v2"
	"testing"
)

func TestPickerBaselines(t *testing.T) {
	s := []Scored{
		{Candidate: Candidate{Worker: "a", ActiveRequests: 2}, Cost: 1},
		{Candidate: Candidate{Worker: "b", ActiveRequests: 1, ActivePrefillTokens: 50}, Cost: 9},
		{Candidate: Candidate{Worker: "c", ActiveRequests: 1, ActivePrefillTokens: 10}, Cost: 5},
	}
	rng := rand.New(rand.NewPCG(1, 1))

	rr := &Picker{Routing: RoutingRoundRobin}
	var got []int
	for range 4 {
		got = append(got, rr.Pick(s, rng))
	}
	if want := []int{0, 1, 2, 0}; !equal(got, want) {
		t.Errorf("round robin = %v, want %v", got, want)
	}
	if i := (&Picker{Routing: RoutingLeastLoaded}).Pick(s, rng); i != 2 {
		t.Errorf("least loaded = %d, want 2 (fewest requests, then fewest prefill tokens)", i)
	}
	if i := (&Picker{Routing: RoutingKV}).Pick(s, rng); i != 0 {
		t.Errorf("kv = %d, want the cheapest", i)
	}
	seen := map[int]bool{}
	random := &Picker{Routing: RoutingRandom}
	for range 300 {
		seen[random.Pick(s, rng)] = true
	}
	if len(seen) != 3 {
		t.Errorf("random reached %v", seen)
	}
	if (&Picker{}).Pick(nil, rng) != -1 {
		t.Error("empty candidates must give -1")
	}
}

func TestParseRouting(t *testing.T) {
	for in, want := range map[string]Routing{"kv": RoutingKV, "round_robin": RoutingRoundRobin,
		"round-robin": RoutingRoundRobin, "random": RoutingRandom, "least_loaded": RoutingLeastLoaded} {
		if got, err := ParseRouting(in); err != nil || got != want {
			t.Errorf("ParseRouting(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseRouting("fastest"); err == nil {
		t.Error("unknown routing accepted")
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
