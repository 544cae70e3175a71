// This file holds what drives the core: engine batches, decoded at the edge, and the signals of their stream.

package ingest

import "kvrouter/internal/kvevents"

// Input is one thing a DP rank's stream tells the core: a Batch, a Gap, an
// Unrecoverable loss, a Restart, a Reconnected stream, or the Engine's
// health. The signals mirror kvstream's items; the driver converts them.
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

func (Batch) input()         {}
func (Gap) input()           {}
func (Unrecoverable) input() {}
func (Restart) input()       {}
func (Reconnected) input()   {}
func (Engine) input()        {}
