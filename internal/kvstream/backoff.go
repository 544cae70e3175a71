// This file holds Backoff: the exponential schedule of redials and retries.

package kvstream

import "time"

// Backoff defaults.
const (
	DefaultBackoffMin = 100 * time.Millisecond
	DefaultBackoffMax = 5 * time.Second
)

// Backoff is an exponential retry schedule: Min, doubling up to Max.
type Backoff struct {
	Min, Max time.Duration
}

// Delay returns the wait before retry number attempt (0 for the first).
// Zero fields take the defaults; Max below Min is raised to Min.
func (b Backoff) Delay(attempt int) time.Duration {
	lo, hi := b.Min, b.Max
	if lo <= 0 {
		lo = DefaultBackoffMin
	}
	if hi <= 0 {
		hi = DefaultBackoffMax
	}
	if hi < lo {
		hi = lo
	}
	d := lo
	for i := 0; i < attempt && d < hi; i++ {
		d *= 2
	}
	return min(d, hi)
}
