// This file holds Request, one completion request of a workload, and their order of arrival.

package workload

import (
	"cmp"
	"errors"
	"slices"
	"time"
)

// ErrConfig marks options or configurations that cannot produce a workload.
var ErrConfig = errors.New("invalid workload configuration")

// Request is one completion request of a workload.
type Request struct {
	ID string
	// Session names the conversation. Turns of one session are sent in
	// order, each after the previous one completed; an empty Session has no
	// such constraint.
	Session string
	Turn    int
	// Arrival is the offset from the start of the run at which the request
	// is due; a turn may go later, when its predecessor is still running.
	Arrival time.Duration
	// Prompt holds token ids. Prompts of one session may share storage:
	// treat them as read-only.
	Prompt []uint32
	// Text is a text prompt, sent only when Prompt is empty.
	Text      string
	MaxTokens int
	CacheSalt string
	// Warmup marks a request that is sent like the others but left out of
	// the measured figures: the first computation of a shared system
	// prompt (see AgenticConfig.WarmPrompts), the same work under every
	// routing policy and one no routing can save.
	Warmup bool
}

// sortByArrival orders requests by arrival, keeping the given order among
// equal arrivals so that ties resolve the same way on every run.
func sortByArrival(reqs []Request) {
	slices.SortStableFunc(reqs, func(a, b Request) int { return cmp.Compare(a.Arrival, b.Arrival) })
}
