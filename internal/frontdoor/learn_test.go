package frontdoor

import (
	"testing"
	"time"

	"kvrouter/internal/hints"
	"kvrouter/internal/index"
	"kvrouter/internal/router"
)

// TestLearnFromUsage: an answer's usage teaches the learner the pull its
// hint caused (what the engine reported, for the hint's source and the
// target) and the target's recompute (time to first token less the pull,
// against the tokens neither cached nor pulled); an answer that names
// another source, or no first token, teaches no more than it can.
func TestLearnFromUsage(t *testing.T) {
	src := index.CacheOwner("o")
	target := index.WorkerRank("B", 0)
	decision := func(hinted bool) *router.Decision {
		d := &router.Decision{Target: router.Target{Worker: router.Worker{ID: "B", BlockSize: 64}, Rank: 0}}
		if hinted {
			d.Hint = hints.Hint{Endpoint: "tcp://a:1", BlockHashes: []uint64{1}}
			d.HintDecision = hints.Decision{Reason: hints.ReasonHinted, Source: src}
		}
		return d
	}
	body := `{"usage":{"prompt_tokens":11000,"prompt_tokens_details":{"cached_tokens":9664},` +
		`"kvrouter":{"peer_restored_tokens":9600,"local_cached_tokens":64,` +
		`"pull":{"source_endpoint":"tcp://a:1","wanted_blocks":150,"pulled_blocks":150,"pulled_tokens":9600,"bytes":157286400,"seconds":0.3,"short":false}}}}`
	u := responseUsage([]byte(body))
	if u == nil || u.KVRouter == nil || u.KVRouter.Pull == nil || u.KVRouter.LocalCachedTokens == nil {
		t.Fatalf("usage read as %+v", u)
	}
	l, err := hints.NewLearner(hints.LearnConfig{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	s := &Server{Learn: l, Now: func() time.Time { return now }}
	s.learn(decision(true), u, 400*time.Millisecond)
	v := l.View()
	if len(v.Pairs) != 1 || v.Pairs[0].Source != src || v.Pairs[0].Target != target || v.Pairs[0].LastMS != 300 {
		t.Fatalf("pairs %+v", v.Pairs)
	}
	if got := v.Pairs[0].BytesPerToken; got != 16<<10 {
		t.Errorf("bytes per token %v, want %d", got, 16<<10)
	}
	if len(v.Targets) != 1 || v.Targets[0].Target != target || v.Targets[0].Prefills != 1 {
		t.Fatalf("targets %+v", v.Targets)
	}
	if got, want := l.View().Recompute.SecondsPerToken, 0.1/1336; got != 1/20000.0 || len(v.Targets) == 0 {
		// One sample is too few to speak for the fleet: the prior's rate.
		t.Errorf("fleet recompute %v s/token after one sample of %v", got, want)
	}
	// The first answer: 1,336 tokens recomputed in 100 ms (the pull's 300
	// taken out). This one leaves no time after the pull: no sample.
	s.learn(decision(true), u, 300*time.Millisecond)
	if got := l.View().Targets[0].Prefills; got != 1 {
		t.Errorf("%d prefills learned, want 1 (a zero recompute time is no sample)", got)
	}
	// Not hinted, or another source: the report is not this decision's.
	other := decision(true)
	other.Hint.Endpoint = "tcp://elsewhere:1"
	for _, d := range []*router.Decision{decision(false), other} {
		s.learn(d, u, 0)
	}
	if got := l.View().Pairs[0].Pulls; got != 2 {
		t.Errorf("%d pulls learned, want 2", got)
	}
}
