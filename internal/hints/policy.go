// This file holds the policy interface and the fixed-threshold policy, MinBlocks (Learned is in learn.go).

package hints

import (
	"math"
	"time"

	"kvrouter/internal/index"
)

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
	// QueuedBlocks are the blocks of pulls from Source that the router
	// hinted and that have not finished: this pull shares the source's
	// transfer with them.
	QueuedBlocks int
}

// Estimate is a policy's verdict with the numbers behind it, kept for
// /debug views and metrics.
type Estimate struct {
	Policy      string
	ExtraBlocks int
	Worth       bool

	// Learned policy only.
	ExtraTokens        int
	Bytes              float64
	BandwidthBytesPerS float64
	PrefillTokensPerS  float64
	Pull               time.Duration
	Recompute          time.Duration
	// Measured says which rates came from telemetry rather than defaults.
	MeasuredBandwidth bool
	MeasuredPrefill   bool

	// The pull's fixed cost, the share of the pair's
	// pulls that came up short, and the decayed sample weights behind the
	// pull and recompute estimates (0: the fleet's or the prior).
	Setup          time.Duration
	ShortShare     float64
	PullSamples    float64
	PrefillSamples float64
}

// policyMinBlocks is MinBlocks' name in Estimate.Policy.
const policyMinBlocks = "min_blocks"

// MinBlocks is the hand-set threshold other routers use: hint when the
// source adds at least this many blocks. It ignores how fast the network or
// the target is, which is why Learned exists.
type MinBlocks int

var _ Policy = MinBlocks(0)

func (m MinBlocks) Consider(p Pull) Estimate {
	return Estimate{
		Policy:      policyMinBlocks,
		ExtraBlocks: p.ExtraBlocks,
		Worth:       p.ExtraBlocks > 0 && p.ExtraBlocks >= int(m),
	}
}

func usable(rate float64) bool { return rate > 0 && !math.IsInf(rate, 0) }

func seconds(s float64) time.Duration {
	if s >= math.MaxInt64/float64(time.Second) {
		return math.MaxInt64
	}
	return time.Duration(math.Round(s * float64(time.Second)))
}
