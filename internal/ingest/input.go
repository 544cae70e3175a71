// This file holds what drives the core: engine batches, decoded at the edge, and the signals of their stream.

package ingest

import "kvrouter/internal/kvevents"

// Input is one thing a DP rank's stream tells the core: a Batch, a Gap, an
// Unrecoverable loss, a Restart, a Reconnected stream, or the Engine's
// health; the engine's Snapshot of what it holds; or what the runner prober
// found at one of the rank's Runners. The stream signals mirror kvstream's
// items; the driver converts them.
type Input interface{ input() }

// Batch is one engine batch, its payload decoded at the edge
// (kvevents.Decoder). The core owns Events once stepped: it fills in
// inherited salts.
type Batch struct {
	// Topic is the live topic: a runner shard suffix
	// (kvevents.RunnerShardTopic) names the TP rank whose runner inventory
	// the batch carries.
	Topic string
	// Epoch is SGLang's publisher epoch the topic names, "" for none
	// (kvstream.TopicEpoch). A new one is a new publisher process.
	Epoch string
	Seq   uint64
	// Replayed: the batch came from the replay endpoint, whose frames carry
	// no topic; Topic is that of the live message that opened the gap.
	Replayed bool
	Events   []kvevents.Event
	// Err, when set, says the payload did not decode: the batch is
	// rejected.
	Err error
}

// Gap reports the missing seqs From..To; Healed resolves it once replayed.
type Gap struct {
	From, To uint64
	Healed   bool
}

// Unrecoverable reports that the batches From..To are lost for good.
type Unrecoverable struct{ From, To uint64 }

// Restart reports that the seq went backwards: a new publisher process.
type Restart struct{ OldSeq, NewSeq uint64 }

// Reconnected reports that the stream's connection was made anew.
type Reconnected struct{}

// Engine reports the engine's health as a liveness probe judges it.
type Engine struct{ Up bool }

// Snapshot is the engine's placement cut (SGLang snapshot-v1): the blocks
// the rank's engine held when it stamped its barrier, the batch at
// ResumeSeq-1. It carries engine hashes without tokens, so it names no
// router identity by itself: the history batches before ResumeSeq (the
// engine's replay buffer) name the blocks, and the cut holds the rank not
// ready until the stream reaches it (see the package doc). A driver steps
// it before the
// first batch of the engine process: at start, or after a Restart or a
// Reconnected, followed by the process's history from seq 0.
type Snapshot struct {
	// Epoch is the publisher epoch as Batch.Epoch names it
	// (kvstream.EpochSuffix of the header's epoch).
	Epoch     string
	ResumeSeq uint64
	Blocks    []kvevents.SnapshotBlock
}

// RunnerState is what the runner prober found at a runner.
type RunnerState uint8

// Runner states.
const (
	// RunnerUp: its control endpoint answered, with its start epoch.
	RunnerUp RunnerState = iota
	// RunnerDown: it did not answer. The owner is not ready (no pull can
	// reach it) but keeps its inventory: the runner may only be slow.
	RunnerDown
	// RunnerExpired: it has not answered for the owner TTL: its inventory
	// is dropped, since nobody can say what it still holds.
	RunnerExpired
)

// Runner reports one of the rank's runners (TP rank TP) as the runner
// prober found it. A cache owner's inventory belongs to its runners, not to
// the engine: with Config.ProbeRunners, engine-level signals only suspend
// the owner, and these reports decide whether its inventory stands.
type Runner struct {
	TP    int
	State RunnerState
	Epoch uint64 // with RunnerUp: the runner's start epoch
}

func (Batch) input()         {}
func (Gap) input()           {}
func (Unrecoverable) input() {}
func (Restart) input()       {}
func (Reconnected) input()   {}
func (Engine) input()        {}
func (Snapshot) input()      {}
func (Runner) input()        {}
