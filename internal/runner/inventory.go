// This file holds Inventory, one change to what a runner holds, and the Sink that receives it.

package runner

import "kvrouter/internal/kvevents"

// Inventory is one change to what the runner holds: the keys of one
// committed store, or of one eviction or removal.
type Inventory struct {
	Keys    []uint64
	Removed bool
	// Tier is always kvevents.TierHost: the runner's pool is host DRAM. The
	// engine reports it as runner-owned (ownership="kvcr" for vLLM, or
	// medium="EXTERNAL" on SGLang's linker).
	Tier kvevents.Tier
}

// Sink receives inventory changes.
//
// Ordering: events reach the sink one at a time, in the order the changes
// happened in the pool (an eviction made to store a block comes before that
// store), never concurrently. They are delivered from the goroutine of a
// runner call that made a change (Deposit, Fetch's transfer, Evict...), after
// the runner's lock is released, and that call does not return before its
// own events were delivered. So the sink may call Query, Read or Stats, but
// must not call a method that changes the pool (it would deadlock), and
// should be quick: a slow sink slows the runner's writers.
//
// The Keys slice belongs to the sink.
type Sink interface {
	Inventory(Inventory)
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(Inventory)

var _ Sink = SinkFunc(nil)

// Inventory calls f.
func (f SinkFunc) Inventory(ev Inventory) { f(ev) }
