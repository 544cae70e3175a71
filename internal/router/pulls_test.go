package router

import (
	"fmt"
	"testing"
	"time"

	"kvrouter/internal/hints"
	"kvrouter/internal/index"
	"kvrouter/internal/kvevents"
)

// learnedPolicy makes a router hint with the learned policy, whose prior
// pulls a block for a tenth of its recompute, with no setup to speak of.
func learnedPolicy(t testing.TB) func(*Config) {
	return func(c *Config) {
		c.Policy = func(bs int) (hints.Policy, error) {
			// A zero Prior.Setup would take the default.
			l, err := hints.NewLearner(hints.LearnConfig{Prior: hints.Prior{Setup: time.Nanosecond, BandwidthBytesPerS: 1e9,
				BytesPerToken: 1000, PrefillTokensPerS: 1e5}})
			if err != nil {
				t.Fatal(err)
			}
			return &hints.Learned{L: l, BlockSize: bs, Margin: 0.1}, nil
		}
	}
}

// TestPullsInFlightShareTheSource: each hinted pull in flight from a
// source lengthens the next one's estimate, until recomputing is cheaper;
// as they end, hints come back. With learnedPolicy's prior a block costs 4 µs
// to pull and 40 µs to recompute, so with the 10% margin 40 blocks are
// worth pulling behind at most 320 queued ones: eight pulls.
func TestPullsInFlightShareTheSource(t *testing.T) {
	prompt := tokens(3, 40)
	r := newRouter(t, learnedPolicy(t))
	f := newFleet(t, r, agg("a", 1), agg("c", 1))
	f.store("a", index.CacheOwner("owner-a-0"), storeOp(prompt, "", kvevents.TierExternal))
	req := Request{Model: "m", Tokens: prompt, Target: "c"}
	var ids []string
	for i := range 9 {
		d := decide(t, r, req)
		if want := i < 8; d.HintDecision.Hinted() != want {
			t.Fatalf("with %d pulls in flight: %s (queued %d blocks), want hinted %v", i, d.HintDecision.Reason, r.pulls.of(d.HintDecision.Source), want)
		}
		id := fmt.Sprint("req", i)
		r.StartPull(id, d)
		r.StartPull(id, d) // counted once
		ids = append(ids, id)
	}
	r.EndPull(ids[0])
	r.EndPull(ids[0])
	if d := decide(t, r, req); !d.HintDecision.Hinted() {
		t.Fatalf("a pull ended: %s", d.HintDecision.Reason)
	}
	for _, id := range ids {
		r.EndPull(id)
	}
	if n := r.pulls.of(index.CacheOwner("owner-a-0")); n != 0 {
		t.Fatalf("%d blocks still counted", n)
	}
}
