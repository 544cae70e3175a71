package router

import (
	"fmt"
	"testing"
	"time"

	"kvrouter/internal/cost"
	"kvrouter/internal/hints"
	"kvrouter/internal/index"
	"kvrouter/internal/kvevents"
)

// peerPriced makes a router price hints into its choice, with a learned
// policy whose prior pulls a block for a tenth of its recompute after the
// given setup.
func peerPriced(t testing.TB, setup time.Duration) func(*Config) {
	if setup == 0 {
		setup = time.Nanosecond // a zero Prior.Setup takes the default
	}
	return func(c *Config) {
		c.PeerCredit = true
		c.Policy = func(bs int) (hints.Policy, error) {
			l, err := hints.NewLearner(hints.LearnConfig{Prior: hints.Prior{Setup: setup, BandwidthBytesPerS: 1e9,
				BytesPerToken: 1000, PrefillTokensPerS: 1e5}})
			if err != nil {
				t.Fatal(err)
			}
			return &hints.Learned{L: l, BlockSize: bs, Margin: 0.1}, nil
		}
	}
}

// TestPeerCredit: a rank that can pull a prefix from a peer's runner is
// priced as holding most of it, so a load that makes the holder dearer
// sends the request to a cold rank, with a hint; without the credit, the
// same load sends it to the rank holding the prefix on its own device.
func TestPeerCredit(t *testing.T) {
	prompt := tokens(3, 40)
	tests := []struct {
		name   string
		edit   func(*Config)
		target string
		reason hints.Reason
	}{
		{"credit: a cold rank pulls", peerPriced(t, 0), "c/0", hints.ReasonHinted},
		{"no credit: the holder's device", func(c *Config) { peerPriced(t, 0)(c); c.PeerCredit = false }, "a/0", hints.ReasonNotBeyondTarget},
		{"credit, pull dearer than recompute", peerPriced(t, time.Second), "a/0", hints.ReasonNotBeyondTarget},
		{"credit, min-blocks policy: no times, no credit", func(c *Config) { c.PeerCredit = true }, "a/0", hints.ReasonNotBeyondTarget},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRouter(t, tc.edit)
			f := newFleet(t, r, agg("a", 1), agg("b", 1), agg("c", 1))
			// a holds the prefix on its device and in its runner; b holds a
			// quarter of it; c nothing. a and b are busy.
			f.store("a", index.WorkerRank("a", 0), storeOp(prompt, "", kvevents.TierDevice))
			f.store("a", index.CacheOwner("owner-a-0"), storeOp(prompt, "", kvevents.TierExternal))
			f.store("b", index.WorkerRank("b", 0), storeOp(prompt[:10*bs], "", kvevents.TierDevice))
			r.Load().Start("busy-a", cost.Rank{Worker: "a", DP: 0}, 0, 30)
			r.Load().Start("busy-b", cost.Rank{Worker: "b", DP: 0}, 0, 30)
			d := decide(t, r, Request{Model: "m", Tokens: prompt})
			if got := target(d); got != tc.target || d.HintDecision.Reason != tc.reason {
				t.Fatalf("target %s (%s), want %s (%s); chosen %+v", got, d.HintDecision.Reason, tc.target, tc.reason, d.Chosen)
			}
		})
	}
}

// TestPeerCreditNeedsAReadySource: a source that is not ready, or whose
// salt is not the request's, gives no credit; a ready one does.
func TestPeerCreditNeedsAReadySource(t *testing.T) {
	prompt := tokens(3, 40)
	for _, tc := range []struct {
		name   string
		edit   func(f *fleet, req *Request)
		credit bool
	}{
		{"ready", func(*fleet, *Request) {}, true},
		{"not ready", func(f *fleet, _ *Request) { f.sinks["a"].SetReady(index.CacheOwner("owner-a-0"), false) }, false},
		{"another salt", func(_ *fleet, req *Request) { req.Salt = "tenant" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRouter(t, peerPriced(t, 0))
			f := newFleet(t, r, agg("a", 1), agg("c", 1))
			f.store("a", index.CacheOwner("owner-a-0"), storeOp(prompt, "", kvevents.TierExternal))
			r.Load().Start("busy-a", cost.Rank{Worker: "a", DP: 0}, 0, 5)
			req := Request{Model: "m", Tokens: prompt}
			tc.edit(f, &req)
			d := decide(t, r, req)
			if (d.Chosen.PeerCredit > 0) != tc.credit {
				t.Fatalf("credited %v: %+v", d.Chosen.PeerCredit, d.Chosen)
			}
		})
	}
}

// TestPullsInFlightShareTheSource: each hinted pull in flight from a
// source lengthens the next one's estimate, until recomputing is cheaper;
// as they end, hints come back. With peerPriced's prior a block costs 4 µs
// to pull and 40 µs to recompute, so with the 10% margin 40 blocks are
// worth pulling behind at most 320 queued ones: eight pulls.
func TestPullsInFlightShareTheSource(t *testing.T) {
	prompt := tokens(3, 40)
	r := newRouter(t, peerPriced(t, 0))
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
