// This file holds why the core rejects a batch, drops an event or resets a rank: what Output.Count counts.

package ingest

// Reason says why the core rejected a batch, dropped an event or an op, or
// reset a rank. Its String is the label both drivers' metrics use.
type Reason uint8

// Why a whole engine batch was rejected. A rejected batch is lost
// information (it may have carried removals), so its rank is reset.
const (
	RejectMalformed Reason = iota // the payload does not decode
	RejectBlockSize               // a store's block size is not the worker's
	RejectEvent                   // an event does not convert to an index op
	RejectTopic                   // a runner shard topic names no TP rank the core folds

	// Why an event or op was left out without rejecting its batch.
	DropPlaceholder   // CPU-offload store without tokens
	DropOtherGroup    // a hybrid model's non-full-attention KV group
	DropNoOwner       // runner-owned, but the rank has no cache owner
	DropUnattributed  // runner store without its TP shard
	DropUnknownParent // store whose parent the source does not hold
	DropInvalid       // an op the output refused for another reason
	DropDuplicate     // a batch the engine's snapshot already holds

	// Why a rank's sources were reset (emptied and rebuilt).
	ResetUnrecoverable // a gap replay could not heal
	ResetRestart       // the engine's seq went backwards
	ResetEpoch         // SGLang's publisher epoch changed
	ResetReconnected   // the event connection was re-established
	ResetSilentGap     // a complete stream named an unknown parent
	ResetRejected      // a batch was rejected
	ResetEngineDown    // the engine failed health checks beyond the grace period
	ResetInconsistent  // the output refused an op it should have accepted
	ResetRunnerRestart // a runner answered with a new start epoch (its owner only)
	ResetRunnerExpired // a runner did not answer for the owner TTL (its owner only)

	NumReasons // the number of reasons, for arrays indexed by Reason
)

var reasonNames = [NumReasons]string{
	RejectMalformed: "malformed", RejectBlockSize: "block_size", RejectEvent: "event", RejectTopic: "topic",
	DropPlaceholder: "placeholder", DropOtherGroup: "other_group", DropNoOwner: "no_owner",
	DropUnattributed: "unattributed", DropUnknownParent: "unknown_parent", DropInvalid: "invalid",
	DropDuplicate:      "duplicate",
	ResetUnrecoverable: "unrecoverable", ResetRestart: "restart", ResetEpoch: "epoch",
	ResetReconnected: "reconnected", ResetSilentGap: "silent_gap", ResetRejected: "rejected",
	ResetEngineDown: "engine_down", ResetInconsistent: "inconsistent",
	ResetRunnerRestart: "runner_restart", ResetRunnerExpired: "runner_expired",
}

func (r Reason) String() string {
	if r < NumReasons {
		return reasonNames[r]
	}
	return "unknown"
}

// Class is what a reason counts: a rejected batch, a dropped event or op,
// or a reset rank.
type Class uint8

// Classes of reasons.
const (
	ClassReject Class = iota
	ClassDrop
	ClassReset
)

// Class returns what r counts.
func (r Reason) Class() Class {
	switch {
	case r < DropPlaceholder:
		return ClassReject
	case r < ResetUnrecoverable:
		return ClassDrop
	}
	return ClassReset
}
