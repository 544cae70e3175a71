// This file holds Clock, the service's time source, and the wall clock.

package mocker

import "time"

// Clock is the service's time source. The scheduler core never reads it: it
// returns how long each step takes, and the service waits that long on the
// clock, so tests can run the core without time at all and the service with
// a clock of their own.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

var _ Clock = realClock{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
