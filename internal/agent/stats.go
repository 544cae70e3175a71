package agent

import (
	"sync/atomic"

	"kvrouter/internal/relay"
)

// Why a whole engine batch was rejected. A rejected batch is lost
// information (it may have carried removals), so its rank is reset.
const (
	RejectMalformed = "malformed"  // the payload does not decode
	RejectBlockSize = "block_size" // a store's block size is not the worker's
	RejectEvent     = "event"      // an event does not convert to an index op
	RejectTopic     = "topic"      // a runner shard topic names no TP rank of the worker
	numRejects      = 4
)

// Why an event or op was dropped without rejecting its batch.
const (
	DropPlaceholder   = "placeholder"    // CPU-offload store without tokens
	DropOtherGroup    = "other_group"    // a hybrid model's non-full-attention KV group
	DropNoOwner       = "no_owner"       // runner-owned, but the worker has no cache owner
	DropUnattributed  = "unattributed"   // runner store without its TP shard (TP > 1)
	DropUnknownParent = "unknown_parent" // store whose parent the source does not hold
	DropInvalid       = "invalid"        // an op the index refused for another reason
	numDrops          = 6
)

// Why a rank's sources were reset (emptied and rebuilt).
const (
	ResetUnrecoverable = "unrecoverable" // a gap replay could not heal
	ResetRestart       = "restart"       // the engine's seq went backwards
	ResetEpoch         = "epoch"         // SGLang's publisher epoch changed
	ResetReconnected   = "reconnected"   // the event connection was re-established
	ResetSilentGap     = "silent_gap"    // a complete stream named an unknown parent
	ResetRejected      = "rejected"      // a batch was rejected
	ResetEngineDown    = "engine_down"   // the engine failed health checks beyond the grace period
	ResetInconsistent  = "inconsistent"  // the index refused an op it should have accepted
	numResets          = 8
)

var (
	rejectNames = [numRejects]string{RejectMalformed, RejectBlockSize, RejectEvent, RejectTopic}
	dropNames   = [numDrops]string{DropPlaceholder, DropOtherGroup, DropNoOwner, DropUnattributed, DropUnknownParent, DropInvalid}
	resetNames  = [numResets]string{ResetUnrecoverable, ResetRestart, ResetEpoch, ResetReconnected, ResetSilentGap,
		ResetRejected, ResetEngineDown, ResetInconsistent}
	kindNames = map[relay.Kind]string{relay.KindOps: "ops", relay.KindReset: "reset", relay.KindReady: "ready", relay.KindGone: "gone"}
)

// Stats are the agent core's counters since it started.
type Stats struct {
	Messages      uint64            // engine batches received (live or replayed)
	Events        uint64            // events decoded from accepted batches
	Rejected      map[string]uint64 // batches rejected, by Reject* reason
	Dropped       map[string]uint64 // events or ops dropped, by Drop* reason
	Gaps          uint64            // gaps opened
	Healed        uint64            // gaps healed by replay
	Resets        map[string]uint64 // rank resets, by Reset* reason
	Published     map[string]uint64 // messages committed, by kind (ops, reset, ready, gone)
	PublishErrors uint64            // messages lost after their change was applied
}

type counters struct {
	messages, events, gaps, healed, publishErrors atomic.Uint64
	rejected                                      [numRejects]atomic.Uint64
	dropped                                       [numDrops]atomic.Uint64
	resets                                        [numResets]atomic.Uint64
	published                                     [relay.KindGone + 1]atomic.Uint64
}

func indexOf(names []string, name string) int {
	for i, n := range names {
		if n == name {
			return i
		}
	}
	panic("agent: unknown counter label " + name)
}

func (c *counters) reject(reason string) { c.rejected[indexOf(rejectNames[:], reason)].Add(1) }
func (c *counters) drop(reason string)   { c.dropped[indexOf(dropNames[:], reason)].Add(1) }
func (c *counters) reset(reason string)  { c.resets[indexOf(resetNames[:], reason)].Add(1) }

func (c *counters) snapshot() Stats {
	s := Stats{
		Messages: c.messages.Load(), Events: c.events.Load(), Gaps: c.gaps.Load(), Healed: c.healed.Load(),
		PublishErrors: c.publishErrors.Load(),
		Rejected:      map[string]uint64{}, Dropped: map[string]uint64{}, Resets: map[string]uint64{}, Published: map[string]uint64{},
	}
	for i, n := range rejectNames {
		s.Rejected[n] = c.rejected[i].Load()
	}
	for i, n := range dropNames {
		s.Dropped[n] = c.dropped[i].Load()
	}
	for i, n := range resetNames {
		s.Resets[n] = c.resets[i].Load()
	}
	for k, n := range kindNames {
		s.Published[n] = c.published[k].Load()
	}
	return s
}
