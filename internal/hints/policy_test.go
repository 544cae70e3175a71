package hints

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"kvrouter/internal/index"
)

// Default rates chosen so the arithmetic is plain: a block is 1 MB at
// 1 GB/s (1 ms to pull) after 10 ms of setup, and 16 tokens at 8000
// tokens/s (2 ms to recompute). Pulling n blocks wins when 10+n < 2n, i.e.
// from 11 blocks on.
var testRates = Rates{
	BandwidthBytesPerS: 1e9,
	SetupLatency:       10 * time.Millisecond,
	PrefillTokensPerS:  8000,
	BytesPerBlock:      1e6,
	BlockSize:          16,
}

func mustCost(t testing.TB, measured func(source, target index.Source) Rates) *CostPolicy {
	t.Helper()
	c, err := NewCostPolicy(testRates, measured)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestPolicyBehaviour holds every policy to the same contract.
func TestPolicyBehaviour(t *testing.T) {
	policies := map[string]Policy{
		"min_blocks":         MinBlocks(4),
		"min_blocks_zero":    MinBlocks(0),
		"cost":               mustCost(t, nil),
		"cost_measured_slow": mustCost(t, func(_, _ index.Source) Rates { return Rates{PrefillTokensPerS: 4000} }),
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
					Candidates: []Candidate{{Source: w2, Depth: 1 + n, Chain: chain(300)[:1+n]}},
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

func TestCostPolicy(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name               string
		src                index.Source // w2 when zero
		measured           func(source, target index.Source) Rates
		extra              int
		worth              bool
		pull, recompute    time.Duration
		measuredBW, measPF bool
	}{
		{name: "below the crossover", extra: 9, pull: 19 * ms, recompute: 18 * ms},
		{name: "at the crossover a tie recomputes", extra: 10, pull: 20 * ms, recompute: 20 * ms},
		{name: "beyond the crossover", extra: 11, worth: true, pull: 21 * ms, recompute: 22 * ms},
		{name: "far beyond", extra: 1000, worth: true, pull: 1010 * ms, recompute: 2000 * ms},
		{name: "slow link never pays off",
			measured: func(_, _ index.Source) Rates { return Rates{BandwidthBytesPerS: 5e8} },
			extra:    1000, pull: 2010 * ms, recompute: 2000 * ms, measuredBW: true},
		{name: "slow target pays off sooner",
			measured: func(_, _ index.Source) Rates { return Rates{PrefillTokensPerS: 4000} },
			extra:    4, worth: true, pull: 14 * ms, recompute: 16 * ms, measPF: true},
		{name: "slow target, still too few blocks",
			measured: func(_, _ index.Source) Rates { return Rates{PrefillTokensPerS: 4000} },
			extra:    3, pull: 13 * ms, recompute: 12 * ms, measPF: true},
		{name: "measured setup and block size override defaults",
			measured: func(_, _ index.Source) Rates { return Rates{SetupLatency: ms, BlockSize: 32, BytesPerBlock: 2e6} },
			extra:    1, worth: true, pull: 3 * ms, recompute: 4 * ms},
		{name: "unusable measurements fall back",
			measured: func(_, _ index.Source) Rates {
				return Rates{BandwidthBytesPerS: math.Inf(1), PrefillTokensPerS: -5, SetupLatency: -ms}
			},
			extra: 11, worth: true, pull: 21 * ms, recompute: 22 * ms},
		{name: "rates are per source and target pair",
			measured: func(s, tg index.Source) Rates {
				if s == w3 && tg == target {
					return Rates{BandwidthBytesPerS: 2e9}
				}
				return Rates{}
			},
			extra: 11, worth: true, pull: 21 * ms, recompute: 22 * ms},
		{name: "the measured pair uses its rate", src: w3,
			measured: func(s, tg index.Source) Rates {
				if s == w3 && tg == target {
					return Rates{BandwidthBytesPerS: 2e9}
				}
				return Rates{}
			},
			extra: 11, worth: true, pull: 15500 * time.Microsecond, recompute: 22 * ms, measuredBW: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := tt.src
			if src == (index.Source{}) {
				src = w2
			}
			e := mustCost(t, tt.measured).Consider(Pull{Source: src, Target: target, ExtraBlocks: tt.extra})
			if e.Worth != tt.worth || e.Pull != tt.pull || e.Recompute != tt.recompute ||
				e.MeasuredBandwidth != tt.measuredBW || e.MeasuredPrefill != tt.measPF {
				t.Fatalf("estimate %+v; want worth=%v pull=%v recompute=%v measured bw=%v prefill=%v",
					e, tt.worth, tt.pull, tt.recompute, tt.measuredBW, tt.measPF)
			}
			if e.Policy != "cost" || e.ExtraTokens == 0 || e.Bytes == 0 {
				t.Errorf("estimate lacks its figures: %+v", e)
			}
		})
	}
}

func TestNewCostPolicyRejects(t *testing.T) {
	for _, tt := range []struct {
		field string
		edit  func(r *Rates)
	}{
		{"BandwidthBytesPerS", func(r *Rates) { r.BandwidthBytesPerS = 0 }},
		{"BandwidthBytesPerS", func(r *Rates) { r.BandwidthBytesPerS = math.NaN() }},
		{"BandwidthBytesPerS", func(r *Rates) { r.BandwidthBytesPerS = math.Inf(1) }},
		{"PrefillTokensPerS", func(r *Rates) { r.PrefillTokensPerS = -1 }},
		{"SetupLatency", func(r *Rates) { r.SetupLatency = -time.Second }},
		{"BytesPerBlock", func(r *Rates) { r.BytesPerBlock = 0 }},
		{"BlockSize", func(r *Rates) { r.BlockSize = 0 }},
	} {
		r := testRates
		tt.edit(&r)
		_, err := NewCostPolicy(r, nil)
		if !errors.Is(err, ErrBadRates) || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("%+v: err = %v, want ErrBadRates naming %s", r, err, tt.field)
		}
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
