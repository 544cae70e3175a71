// This file holds Clock, the time source of a run and a progress bar, and the wall clock.

package loadgen

import "time"

// Clock is the time source of a run and of a progress bar.
type Clock interface {
	Now() time.Time
	// After delivers once d has passed; d ≤ 0 delivers at once.
	After(d time.Duration) <-chan time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

var _ Clock = SystemClock{}

func (SystemClock) Now() time.Time                         { return time.Now() }
func (SystemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
