// This file holds the policies that weigh a pull against a recompute: MinBlocks and CostPolicy.

package hints

import (
	"errors"
	"fmt"
	"math"
	"time"

	"kvrouter/internal/index"
)

// ErrBadRates marks a cost policy configured with rates that cannot produce
// an estimate.
var ErrBadRates = errors.New("hints: bad rates")

// Policy decides whether pulling a source's extra blocks beats recomputing
// them on the target.
type Policy interface {
	Consider(p Pull) Estimate
}

// Pull is the transfer a hint would cause.
type Pull struct {
	Source index.Source
	Target index.Source
	// ExtraBlocks is how many blocks the target would gain beyond its own
	// cached prefix; blocks it already holds are not pulled.
	ExtraBlocks int
}

// Estimate is a policy's verdict with the numbers behind it, kept for
// /debug views and metrics.
type Estimate struct {
	Policy      string
	ExtraBlocks int
	Worth       bool

	// Cost policy only.
	ExtraTokens        int
	Bytes              float64
	BandwidthBytesPerS float64
	PrefillTokensPerS  float64
	Pull               time.Duration
	Recompute          time.Duration
	// Measured says which rates came from telemetry rather than defaults.
	MeasuredBandwidth bool
	MeasuredPrefill   bool
}

// Policy names as reported in Estimate.Policy.
const (
	policyMinBlocks = "min_blocks"
	policyCost      = "cost"
)

// MinBlocks is the hand-set threshold other routers use: hint when the
// source adds at least this many blocks. It ignores how fast the network or
// the target is, which is why CostPolicy exists.
type MinBlocks int

var _ Policy = MinBlocks(0)

func (m MinBlocks) Consider(p Pull) Estimate {
	return Estimate{
		Policy:      policyMinBlocks,
		ExtraBlocks: p.ExtraBlocks,
		Worth:       p.ExtraBlocks > 0 && p.ExtraBlocks >= int(m),
	}
}

// Rates are the figures a cost estimate needs. Zero means unknown.
type Rates struct {
	// BandwidthBytesPerS is the measured source→target transfer rate.
	BandwidthBytesPerS float64
	// SetupLatency is the fixed cost of a pull: control round trips,
	// registration, the restore step.
	SetupLatency time.Duration
	// PrefillTokensPerS is the target's measured prefill throughput.
	PrefillTokensPerS float64
	BytesPerBlock     int64
	BlockSize         int // tokens per block
}

// CostPolicy hints only when pulling the extra blocks is estimated to finish
// sooner than recomputing them: a fixed block threshold is wrong both on a
// fast fabric (where even a few blocks pay off) and on a slow or busy link
// (where a long prefix still loses to a fast prefill).
type CostPolicy struct {
	defaults Rates
	measured func(source, target index.Source) Rates
}

var _ Policy = (*CostPolicy)(nil)

// NewCostPolicy returns a cost policy. defaults must be complete, since they
// stand in for any rate telemetry has not measured yet; measured may be nil
// and may leave any field zero.
func NewCostPolicy(defaults Rates, measured func(source, target index.Source) Rates) (*CostPolicy, error) {
	switch {
	case !(defaults.BandwidthBytesPerS > 0) || math.IsInf(defaults.BandwidthBytesPerS, 0):
		return nil, fmt.Errorf("%w: BandwidthBytesPerS must be a positive finite default, got %v",
			ErrBadRates, defaults.BandwidthBytesPerS)
	case !(defaults.PrefillTokensPerS > 0) || math.IsInf(defaults.PrefillTokensPerS, 0):
		return nil, fmt.Errorf("%w: PrefillTokensPerS must be a positive finite default, got %v",
			ErrBadRates, defaults.PrefillTokensPerS)
	case defaults.SetupLatency < 0:
		return nil, fmt.Errorf("%w: SetupLatency must not be negative, got %v", ErrBadRates, defaults.SetupLatency)
	case defaults.BytesPerBlock <= 0:
		return nil, fmt.Errorf("%w: BytesPerBlock must be positive, got %d", ErrBadRates, defaults.BytesPerBlock)
	case defaults.BlockSize <= 0:
		return nil, fmt.Errorf("%w: BlockSize must be positive, got %d", ErrBadRates, defaults.BlockSize)
	}
	return &CostPolicy{defaults: defaults, measured: measured}, nil
}

func (c *CostPolicy) Consider(p Pull) Estimate {
	r := c.defaults
	e := Estimate{Policy: policyCost, ExtraBlocks: p.ExtraBlocks}
	if c.measured != nil {
		m := c.measured(p.Source, p.Target)
		if usable(m.BandwidthBytesPerS) {
			r.BandwidthBytesPerS, e.MeasuredBandwidth = m.BandwidthBytesPerS, true
		}
		if usable(m.PrefillTokensPerS) {
			r.PrefillTokensPerS, e.MeasuredPrefill = m.PrefillTokensPerS, true
		}
		if m.SetupLatency > 0 {
			r.SetupLatency = m.SetupLatency
		}
		if m.BytesPerBlock > 0 {
			r.BytesPerBlock = m.BytesPerBlock
		}
		if m.BlockSize > 0 {
			r.BlockSize = m.BlockSize
		}
	}
	e.BandwidthBytesPerS, e.PrefillTokensPerS = r.BandwidthBytesPerS, r.PrefillTokensPerS
	if p.ExtraBlocks <= 0 {
		return e
	}
	e.ExtraTokens = p.ExtraBlocks * r.BlockSize
	e.Bytes = float64(p.ExtraBlocks) * float64(r.BytesPerBlock)
	// Prefill cost per token grows with context length, so a linear
	// recompute estimate is a lower bound: it errs towards recomputing,
	// which is the side a failed pull falls back to anyway.
	pull := r.SetupLatency.Seconds() + e.Bytes/r.BandwidthBytesPerS
	recompute := float64(e.ExtraTokens) / r.PrefillTokensPerS
	e.Pull, e.Recompute = seconds(pull), seconds(recompute)
	e.Worth = pull < recompute
	return e
}

func usable(rate float64) bool { return rate > 0 && !math.IsInf(rate, 0) }

func seconds(s float64) time.Duration {
	if s >= math.MaxInt64/float64(time.Second) {
		return math.MaxInt64
	}
	return time.Duration(math.Round(s * float64(time.Second)))
}
