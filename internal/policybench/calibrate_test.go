package policybench

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"testing"
	"time"
)

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol*math.Max(1, math.Abs(want)) }

func TestNominalPrefillRate(t *testing.T) {
	for _, c := range []struct {
		perToken time.Duration
		speedup  float64
		want     float64
	}{
		{75 * time.Microsecond, 1, 1e6 / 75},
		{75 * time.Microsecond, 2, 2e6 / 75},
		{50 * time.Microsecond, 0.5, 1e4},
		{0, 1, 0},
		{75 * time.Microsecond, 0, 0},
	} {
		if got := NominalPrefillRate(c.perToken, c.speedup); !near(got, c.want, 1e-12) {
			t.Errorf("NominalPrefillRate(%v, %v) = %v, want %v", c.perToken, c.speedup, got, c.want)
		}
	}
}

func TestEffectiveGbps(t *testing.T) {
	// 16 KiB per token at 8 Gbit/s is 16.384 µs per token; a 5 µs restore
	// makes 21.384 µs, i.e. 131072 bits / 21.384 µs.
	got := EffectiveGbps(16<<10, 8, 5)
	want := 131072 / 21.384e-6 / 1e9
	if !near(got, want, 1e-9) {
		t.Fatalf("EffectiveGbps = %v, want %v", got, want)
	}
	if got := EffectiveGbps(16<<10, 8, 0); !near(got, 8, 1e-12) {
		t.Fatalf("without a restore cost the rate must stay 8, got %v", got)
	}
	if got := EffectiveGbps(0, 8, 5); got != 0 {
		t.Fatalf("no bytes per token: %v, want 0", got)
	}
}

func TestCrossover(t *testing.T) {
	// Recompute 75 µs/token; pull 16.384 µs/token; 2 ms of setup is paid
	// back after 2000/58.616 tokens.
	x, ok := Crossover(2*time.Millisecond, 16<<10, 8, 1e6/75)
	if !ok || !near(x, 2000/(75-16.384), 1e-9) {
		t.Fatalf("Crossover = %v, %v; want %v", x, ok, 2000/(75-16.384))
	}
	// At the crossover both cost the same, by the policy's own formula.
	pull := 2e-3 + x*8*(16<<10)/8e9
	recompute := x / (1e6 / 75)
	if !near(pull, recompute, 1e-9) {
		t.Fatalf("at %v tokens pull %v s, recompute %v s", x, pull, recompute)
	}
	// A transfer slower per token than the recompute never pays.
	if _, ok := Crossover(time.Millisecond, 16<<10, 1, 1e6/75); ok {
		t.Fatal("1 Gbit/s (131 µs/token) against 75 µs/token must never pay")
	}
	if x, ok := Crossover(0, 16<<10, 8, 1e6/75); !ok || x != 0 {
		t.Fatalf("no setup: crossover %v, %v; want 0, true", x, ok)
	}
}

// probesOn returns pulls of the given sizes on the line setup + n × perBlock.
func probesOn(setupMS, perBlockMS float64, sizes ...int) []Probe {
	var out []Probe
	for _, n := range sizes {
		out = append(out, Probe{Blocks: n, PullMS: setupMS + float64(n)*perBlockMS, PrefillMS: 5 + float64(n)*4.8})
	}
	return out
}

func TestFitPulls(t *testing.T) {
	const blockBytes = 1 << 20
	// 10 Gbit/s moves a MiB in 0.8388608 ms.
	perBlock := 8 * float64(blockBytes) / 10e9 * 1e3
	probes := probesOn(1.5, perBlock, 2, 12, 48, 2, 12, 48)
	// One outlier per size is voted down by the two others.
	probes = append(probes, Probe{Blocks: 2, PullMS: 40}, Probe{Blocks: 48, PullMS: 0.1})
	probes = append(probes, probesOn(1.5, perBlock, 2, 48)...)
	setup, gbps, err := FitPulls(probes, blockBytes)
	if err != nil {
		t.Fatal(err)
	}
	if !near(setup.Seconds()*1e3, 1.5, 1e-6) || !near(gbps, 10, 1e-6) {
		t.Fatalf("FitPulls = %v, %v Gbit/s; want 1.5ms, 10 Gbit/s", setup, gbps)
	}
	// A negative intercept (noise on a tiny setup) is no negative cost.
	setup, _, err = FitPulls(probesOn(-0.3, perBlock, 2, 48), blockBytes)
	if err != nil || setup != 0 {
		t.Fatalf("negative intercept: setup %v, err %v; want 0, nil", setup, err)
	}
}

// TestPresetCrossover: the presets' simulated setup puts the crossover at
// a few thousand tokens over the range of loopback rates seen.
func TestPresetCrossover(t *testing.T) {
	o := Full()
	for _, gbps := range []float64{5, 7.5, 10, 30} {
		c := newCalibration(&o, o.PullSetup, gbps)
		if c.CrossoverTokens == nil || *c.CrossoverTokens < 1500 || *c.CrossoverTokens > 3500 {
			t.Errorf("%v Gbit/s: crossover %v, want a few thousand tokens", gbps, c.CrossoverTokens)
		}
	}
}

func TestFitPullsRefusesWhatCannotBeFitted(t *testing.T) {
	for name, probes := range map[string][]Probe{
		"one size":       probesOn(1, 1, 12, 12, 12),
		"no growth":      probesOn(3, 0, 2, 48),
		"shrinking time": probesOn(30, -0.5, 2, 48),
		"none":           nil,
	} {
		if _, _, err := FitPulls(probes, 1<<20); !errors.Is(err, ErrCalibration) {
			t.Errorf("%s: err %v, want ErrCalibration", name, err)
		}
	}
}

func TestFitPrefill(t *testing.T) {
	// 4.8 ms per 64-token block is 75 µs per token.
	if got := FitPrefill(probesOn(1, 1, 2, 12, 48), 64); !near(got, 1e6/75, 1e-9) {
		t.Fatalf("FitPrefill = %v, want %v", got, 1e6/75)
	}
	if got := FitPrefill(probesOn(1, 1, 12), 64); got != 0 {
		t.Fatalf("one size: %v, want 0", got)
	}
}

func TestNewCalibration(t *testing.T) {
	o := Full()
	c := newCalibration(&o, 2*time.Millisecond, 8)
	if c.PrefillTokensPerS != 1e6/75 || c.RestoreUSPerToken != 5 || c.HintSetupMS != 2 {
		t.Fatalf("calibration %+v", c)
	}
	if want := EffectiveGbps(16<<10, 8, 5); c.HintBandwidthGbps != want {
		t.Fatalf("hint bandwidth %v, want %v", c.HintBandwidthGbps, want)
	}
	want, _ := Crossover(2*time.Millisecond, 16<<10, c.HintBandwidthGbps, 1e6/75)
	if c.CrossoverTokens == nil || *c.CrossoverTokens != want {
		t.Fatalf("crossover %v, want %v", c.CrossoverTokens, want)
	}
	// The restore scales with the speedup like every simulated cost.
	o.Speedup = 4
	if c := newCalibration(&o, 0, 8); c.RestoreUSPerToken != 1.25 || c.PrefillTokensPerS != 4e6/75 {
		t.Fatalf("speedup 4: %+v", c)
	}
	// 1 Gbit/s is slower per token than a recompute: no crossover.
	o.Speedup = 1
	if c := newCalibration(&o, 0, 1); c.CrossoverTokens != nil {
		t.Fatalf("1 Gbit/s: crossover %v, want none", *c.CrossoverTokens)
	}
}

func TestRouterFlags(t *testing.T) {
	o := Full()
	c := newCalibration(&o, 1500*time.Microsecond, 9.5)
	flags := c.RouterFlags()
	value := func(name string) float64 {
		i := slices.Index(flags, name)
		if i < 0 || i+1 >= len(flags) {
			t.Fatalf("%s missing from %q", name, flags)
		}
		v, err := strconv.ParseFloat(flags[i+1], 64)
		if err != nil {
			t.Fatalf("%s %q: %v", name, flags[i+1], err)
		}
		return v
	}
	if v := value("--kv-bytes-per-token"); v != 16<<10 {
		t.Errorf("--kv-bytes-per-token %v", v)
	}
	if v := value("--hint-setup-ms"); v != 1.5 {
		t.Errorf("--hint-setup-ms %v", v)
	}
	if v := value("--hint-prefill-tokens-per-s"); !near(v, 1e6/75, 1e-5) {
		t.Errorf("--hint-prefill-tokens-per-s %v", v)
	}
	if v := value("--hint-bandwidth-gbps"); !near(v, c.HintBandwidthGbps, 1e-5) {
		t.Errorf("--hint-bandwidth-gbps %v, want %v", v, c.HintBandwidthGbps)
	}
}

func TestSlowEngines(t *testing.T) {
	tests := []struct {
		name              string
		nominal, measured float64
		slow              bool
	}{
		{"at speed", 13333, 13250, false},
		{"just within", 13333, 12100, false},
		{"short by a third", 13333, 8867, true},
		{"not measured", 13333, 0, false},
		{"no nominal", 0, 8867, false},
	}
	for _, tt := range tests {
		c := Calibration{PrefillTokensPerS: tt.nominal, MeasuredPrefillTokensPerS: tt.measured}
		if _, slow := c.slowEngines(); slow != tt.slow {
			t.Errorf("%s: slow %v, want %v", tt.name, slow, tt.slow)
		}
	}
}
