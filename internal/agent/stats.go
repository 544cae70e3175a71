// This file holds the agent core's counters.

package agent

import (
	"sync/atomic"

	"kvrouter/internal/ingest"
	"kvrouter/internal/relay"
)

var kindNames = map[relay.Kind]string{relay.KindOps: "ops", relay.KindReset: "reset", relay.KindReady: "ready", relay.KindGone: "gone"}

// Stats are the agent core's counters since it started.
type Stats struct {
	Messages uint64 // engine batches received (live or replayed)
	Events   uint64 // events decoded from batches
	Gaps     uint64 // gaps opened
	Healed   uint64 // gaps healed by replay
	// Counts are the ingest core's rejected batches, dropped events or ops
	// and rank resets, by reason.
	Counts        [ingest.NumReasons]uint64
	Published     map[string]uint64 // messages committed, by kind (ops, reset, ready, gone)
	PublishErrors uint64            // messages lost after their change was applied
}

type counters struct {
	messages, events, gaps, healed, publishErrors atomic.Uint64
	reasons                                       [ingest.NumReasons]atomic.Uint64
	published                                     [relay.KindGone + 1]atomic.Uint64
}

func (c *counters) snapshot() Stats {
	s := Stats{
		Messages: c.messages.Load(), Events: c.events.Load(), Gaps: c.gaps.Load(), Healed: c.healed.Load(),
		PublishErrors: c.publishErrors.Load(), Published: map[string]uint64{},
	}
	for i := range c.reasons {
		s.Counts[i] = c.reasons[i].Load()
	}
	for k, n := range kindNames {
		s.Published[n] = c.published[k].Load()
	}
	return s
}
