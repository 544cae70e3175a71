package hints

import (
	"math"
	"testing"
	"time"

	"kvrouter/internal/index"
)

// Figures chosen so the arithmetic is plain: a 16-token block is 1 MB
// at 1 GB/s (1 ms to pull) after 10 ms of setup, and 2 ms to recompute at
// 8000 tokens/s. Pulling n blocks wins when 10+n < 2n, i.e. from 11 blocks
// on.
var plain = Overrides{Setup: 10 * time.Millisecond, BandwidthBytesPerS: 1e9, BytesPerToken: 1e6 / 16, PrefillTokensPerS: 8000}

// fixed is a Learned policy whose figures are all an operator's.
func fixed(t testing.TB, o Overrides) *Learned {
	t.Helper()
	l, err := NewLearner(LearnConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return &Learned{L: l, BlockSize: 16, Fixed: o}
}

// learnedSlowTarget is a Learned policy that measured a target recomputing
// at 4000 tokens/s: pulls pay off sooner there.
func learnedSlowTarget(t testing.TB) *Learned {
	p := fixed(t, Overrides{Setup: plain.Setup, BandwidthBytesPerS: plain.BandwidthBytesPerS, BytesPerToken: plain.BytesPerToken})
	now := time.Unix(1_700_000_000, 0)
	for range 4 {
		now = now.Add(time.Second)
		p.L.ObservePrefill(target, 4000, time.Second, now)
	}
	return p
}

// TestPolicyBehaviour holds every policy to the same contract.
func TestPolicyBehaviour(t *testing.T) {
	policies := map[string]Policy{
		"min_blocks":            MinBlocks(4),
		"min_blocks_zero":       MinBlocks(0),
		"learned_prior":         fixed(t, Overrides{}),
		"learned_fixed":         fixed(t, plain),
		"learned_measured_slow": learnedSlowTarget(t),
		"learned_with_a_margin": func() Policy { p := fixed(t, plain); p.Margin = 0.3; return p }(),
	}
	for name, p := range policies {
		t.Run(name, func(t *testing.T) {
			for _, n := range []int{-1, 0} {
				if e := p.Consider(Pull{Source: w2, Target: target, ExtraBlocks: n}); e.Worth {
					t.Errorf("worth pulling %d blocks", n)
				}
			}
			worthFrom := -1
			for n := 1; n <= 256; n++ {
				e := p.Consider(Pull{Source: w2, Target: target, ExtraBlocks: n})
				if e.ExtraBlocks != n || e.Policy == "" {
					t.Fatalf("estimate for %d blocks: %+v", n, e)
				}
				if again := p.Consider(Pull{Source: w2, Target: target, ExtraBlocks: n}); again != e {
					t.Fatalf("not deterministic: %+v then %+v", e, again)
				}
				switch {
				case e.Worth && worthFrom < 0:
					worthFrom = n
				case !e.Worth && worthFrom >= 0:
					t.Fatalf("worth at %d blocks but not at %d: more cached blocks never make a pull worse", worthFrom, n)
				}
			}
			if worthFrom < 0 {
				t.Fatal("never worth pulling within 256 blocks")
			}
			// Select follows the policy's verdict on both sides of it.
			for _, n := range []int{worthFrom - 1, worthFrom} {
				if n < 1 {
					continue
				}
				metas := fleet()
				req := Request{Target: target, TargetMeta: metas[target], PrefixToBeat: 1, Chain: chain(300),
					Candidates: []Candidate{{Source: w2, Depth: 1 + n, Chain: chain(300)[:1+n], SaltKnown: true}},
					Meta:       func(s index.Source) (Meta, bool) { m, ok := metas[s]; return m, ok }}
				h, d := Select(req, p)
				want := n >= worthFrom
				if d.Hinted() != want || (len(h.BlockHashes) > 0) != want || d.Estimate.Worth != want {
					t.Errorf("%d extra blocks: decision %+v, hint of %d blocks; want hinted=%v", n, d, len(h.BlockHashes), want)
				}
				if !want && d.Reason != ReasonNotWorthPulling {
					t.Errorf("%d extra blocks: reason %v, want %v", n, d.Reason, ReasonNotWorthPulling)
				}
			}
		})
	}
}

func TestMinBlocks(t *testing.T) {
	for _, tt := range []struct {
		min, extra int
		worth      bool
	}{{4, 3, false}, {4, 4, true}, {4, 5, true}, {0, 1, true}, {-2, 1, true}, {1, 0, false}} {
		if e := MinBlocks(tt.min).Consider(Pull{ExtraBlocks: tt.extra}); e.Worth != tt.worth {
			t.Errorf("MinBlocks(%d) with %d extra: worth=%v, want %v", tt.min, tt.extra, e.Worth, tt.worth)
		}
	}
}

// TestLearnedArithmetic: with fixed figures the policy hints exactly when
// the pull costs less than (1 - margin) of the recompute; measured
// figures (a slow target) move the crossover.
func TestLearnedArithmetic(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name            string
		p               *Learned
		extra           int
		worth           bool
		pull, recompute time.Duration
		measPF          bool
	}{
		{name: "below the crossover", p: fixed(t, plain), extra: 9, pull: 19 * ms, recompute: 18 * ms},
		{name: "at the crossover a tie recomputes", p: fixed(t, plain), extra: 10, pull: 20 * ms, recompute: 20 * ms},
		{name: "beyond the crossover", p: fixed(t, plain), extra: 11, worth: true, pull: 21 * ms, recompute: 22 * ms},
		{name: "far beyond", p: fixed(t, plain), extra: 1000, worth: true, pull: 1010 * ms, recompute: 2000 * ms},
		{name: "a margin moves the crossover",
			p: func() *Learned { p := fixed(t, plain); p.Margin = 0.3; return p }(), extra: 25, pull: 35 * ms, recompute: 50 * ms},
		{name: "slow link never pays off", p: fixed(t, Overrides{Setup: plain.Setup, BandwidthBytesPerS: 5e8, BytesPerToken: plain.BytesPerToken,
			PrefillTokensPerS: plain.PrefillTokensPerS}), extra: 1000, pull: 2010 * ms, recompute: 2000 * ms},
		{name: "measured slow target pays off sooner", p: learnedSlowTarget(t), extra: 4, worth: true, pull: 14 * ms, recompute: 16 * ms, measPF: true},
		{name: "slow target, still too few blocks", p: learnedSlowTarget(t), extra: 3, pull: 13 * ms, recompute: 12 * ms, measPF: true},
		{name: "a fixed zero setup", p: fixed(t, Overrides{Setup: -1, BandwidthBytesPerS: plain.BandwidthBytesPerS, BytesPerToken: plain.BytesPerToken,
			PrefillTokensPerS: plain.PrefillTokensPerS}), extra: 1, worth: true, pull: ms, recompute: 2 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := tt.p.Consider(Pull{Source: w2, Target: target, ExtraBlocks: tt.extra})
			if e.Worth != tt.worth || e.Pull != tt.pull || e.Recompute != tt.recompute || e.MeasuredPrefill != tt.measPF || e.MeasuredBandwidth {
				t.Fatalf("estimate %+v; want worth=%v pull=%v recompute=%v measured prefill=%v",
					e, tt.worth, tt.pull, tt.recompute, tt.measPF)
			}
			if e.Policy != policyLearned || e.ExtraTokens == 0 || e.Bytes == 0 {
				t.Errorf("estimate lacks its figures: %+v", e)
			}
		})
	}
}

func TestSecondsSaturates(t *testing.T) {
	if got := seconds(1e300); got != math.MaxInt64 {
		t.Errorf("seconds(1e300) = %v", got)
	}
	if got := seconds(1.5); got != 1500*time.Millisecond {
		t.Errorf("seconds(1.5) = %v", got)
	}
}
