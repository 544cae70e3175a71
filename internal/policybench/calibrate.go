// This file holds the cost policy's calibration from measured peer pulls.

package policybench

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// ErrCalibration marks pull measurements that give no usable cost model.
var ErrCalibration = errors.New("policybench: calibration failed")

// Calibration is what the kv_hints router's cost policy is told, and how it
// was derived. The policy hints when
//
//	setup + bytes/bandwidth < tokens/prefill_rate
//
// so for its crossover to be the engines' real one, every term must be the
// engines' wall-clock cost: simulated costs divided by the speedup, real
// transfers as measured.
type Calibration struct {
	BlockSize       int `json:"block_size"`
	KVBytesPerToken int `json:"kv_bytes_per_token"`
	// PrefillTokensPerS is the engines' recompute rate in wall time:
	// 1e6 / --prefill-us-per-token × --speedup.
	PrefillTokensPerS float64 `json:"prefill_tokens_per_s"`
	// PullSetupMS and PullGbps describe one peer pull as measured (or as
	// given by flags): a fixed cost plus the bytes at this rate.
	PullSetupMS float64 `json:"pull_setup_ms"`
	PullGbps    float64 `json:"pull_gbps"`
	// RestoreUSPerToken is the engine's wall-clock cost of copying a pulled
	// token into its GPU pool (--restore-us-per-token / --speedup), part of
	// what a pull costs the request.
	RestoreUSPerToken float64 `json:"restore_us_per_token"`
	// HintBandwidthGbps folds the restore into the transfer rate, since
	// the policy has no term of its own for it: it is what
	// --hint-bandwidth-gbps is set to.
	HintBandwidthGbps float64 `json:"hint_bandwidth_gbps"`
	HintSetupMS       float64 `json:"hint_setup_ms"`
	// CrossoverTokens is the extra prefix length beyond which a pull beats
	// a recompute; null (JSON) when pulls never do.
	CrossoverTokens *float64 `json:"crossover_tokens"`
	// Measured says the pull figures come from probe pulls in this
	// cluster; MeasuredPrefillTokensPerS is the recompute rate the same
	// probes observed (a check on the nominal one, not used).
	Measured                  bool    `json:"measured"`
	MeasuredPrefillTokensPerS float64 `json:"measured_prefill_tokens_per_s,omitempty"`
	Probes                    []Probe `json:"probes,omitempty"`
}

// Probe is one measured peer pull.
type Probe struct {
	Blocks int `json:"blocks"`
	// PullMS is the target engine's wall time of the pull (its
	// peer-pull histogram); PrefillMS the source's completion time of the
	// same prompt computed from scratch.
	PullMS    float64 `json:"pull_ms"`
	PrefillMS float64 `json:"prefill_ms"`
}

// NominalPrefillRate is the engines' prefill rate in wall-clock tokens/s.
func NominalPrefillRate(perToken time.Duration, speedup float64) float64 {
	if perToken <= 0 || speedup <= 0 {
		return 0
	}
	return float64(time.Second) / float64(perToken) * speedup
}

// EffectiveGbps is the transfer rate that, alone, costs a pulled token
// what the transfer and the engine's restore of it cost together.
func EffectiveGbps(kvBytesPerToken int, pullGbps, restoreUSPerToken float64) float64 {
	if kvBytesPerToken <= 0 || pullGbps <= 0 {
		return 0
	}
	bits := 8 * float64(kvBytesPerToken)
	perToken := bits/(pullGbps*1e9) + restoreUSPerToken/1e6
	return bits / perToken / 1e9
}

// Crossover is the prefix length, in tokens, at which a pull (setup plus
// transfer) costs what a recompute does; ok is false when no length makes
// the pull cheaper.
func Crossover(setup time.Duration, kvBytesPerToken int, gbps, prefillTokensPerS float64) (tokens float64, ok bool) {
	if gbps <= 0 || prefillTokensPerS <= 0 {
		return 0, false
	}
	pullPerToken := 8 * float64(kvBytesPerToken) / (gbps * 1e9)
	gain := 1/prefillTokensPerS - pullPerToken
	if gain <= 0 {
		return 0, false
	}
	return setup.Seconds() / gain, true
}

// FitPulls fits pull time = setup + blocks × per-block time through the
// median time of each probe size, by least squares, and returns the setup
// (never below zero) and the transfer rate. It needs two distinct sizes.
func FitPulls(probes []Probe, blockBytes int) (setup time.Duration, gbps float64, err error) {
	bySize := map[int][]float64{}
	for _, p := range probes {
		bySize[p.Blocks] = append(bySize[p.Blocks], p.PullMS)
	}
	if len(bySize) < 2 {
		return 0, 0, fmt.Errorf("%w: pulls of %d distinct sizes, want 2 or more", ErrCalibration, len(bySize))
	}
	var xs, ys []float64
	for n, ms := range bySize {
		xs = append(xs, float64(n))
		ys = append(ys, median(ms))
	}
	a, b := lineFit(xs, ys)
	if !(b > 0) {
		return 0, 0, fmt.Errorf("%w: pull time does not grow with size (%.3f ms per block); the machine is too busy to measure, set --hint-bandwidth-gbps and --hint-setup-ms",
			ErrCalibration, b)
	}
	setup = time.Duration(math.Max(0, a) * float64(time.Millisecond))
	gbps = 8 * float64(blockBytes) / (b / 1e3) / 1e9
	return setup, gbps, nil
}

// slowEngines is how far below their configured speed the probes saw the
// engines recompute. An engine's real work per step (filling, copying and
// hashing KV bytes) is part of its simulated time, so it keeps its speed
// unless the host cannot give it the CPU; 10% short is where a run
// compares the policies on a slower cluster than the one configured.
func (c Calibration) slowEngines() (share float64, slow bool) {
	if c.MeasuredPrefillTokensPerS <= 0 || c.PrefillTokensPerS <= 0 {
		return 0, false
	}
	share = c.MeasuredPrefillTokensPerS / c.PrefillTokensPerS
	return share, share < 0.9
}

// FitPrefill is the recompute rate (tokens/s) through the median
// completion time of each probe size, or 0 when it cannot tell.
func FitPrefill(probes []Probe, blockSize int) float64 {
	bySize := map[int][]float64{}
	for _, p := range probes {
		bySize[p.Blocks] = append(bySize[p.Blocks], p.PrefillMS)
	}
	var xs, ys []float64
	for n, ms := range bySize {
		xs = append(xs, float64(n*blockSize))
		ys = append(ys, median(ms))
	}
	if len(xs) < 2 {
		return 0
	}
	_, b := lineFit(xs, ys)
	if !(b > 0) {
		return 0
	}
	return 1e3 / b
}

// lineFit returns the least-squares intercept and slope of ys over xs.
func lineFit(xs, ys []float64) (a, b float64) {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	den := n*sxx - sx*sx
	if den == 0 {
		return math.NaN(), math.NaN()
	}
	b = (n*sxy - sx*sy) / den
	return (sy - b*sx) / n, b
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// pullSetupWall is the engines' simulated pull setup in wall time.
func (o *Options) pullSetupWall() time.Duration {
	if o.PullSetup <= 0 {
		return 0
	}
	return time.Duration(float64(o.PullSetup) / o.Speedup)
}

// newCalibration completes a calibration from the pull figures.
func newCalibration(o *Options, setup time.Duration, pullGbps float64) Calibration {
	c := Calibration{
		BlockSize:         o.BlockSize,
		KVBytesPerToken:   o.KVBytesPerToken,
		PrefillTokensPerS: NominalPrefillRate(o.PrefillPerToken, o.Speedup),
		PullSetupMS:       ms(setup),
		PullGbps:          pullGbps,
		RestoreUSPerToken: float64(o.RestorePerToken) / float64(time.Microsecond) / o.Speedup,
		HintSetupMS:       ms(setup),
	}
	c.HintBandwidthGbps = EffectiveGbps(o.KVBytesPerToken, pullGbps, c.RestoreUSPerToken)
	if x, ok := Crossover(setup, o.KVBytesPerToken, c.HintBandwidthGbps, c.PrefillTokensPerS); ok {
		c.CrossoverTokens = &x
	}
	return c
}

// RouterFlags are the cost-policy flags of every router, hinting or not,
// so that the policies differ only in --routing and --hint-policy.
func (c Calibration) RouterFlags() []string {
	return []string{
		"--kv-bytes-per-token", strconv.Itoa(c.KVBytesPerToken),
		"--hint-bandwidth-gbps", fmtFloat(c.HintBandwidthGbps),
		"--hint-setup-ms", fmtFloat(c.HintSetupMS),
		"--hint-prefill-tokens-per-s", fmtFloat(c.PrefillTokensPerS),
	}
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', 6, 64) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
