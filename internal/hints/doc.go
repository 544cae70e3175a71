// Package hints decides when the router tells a target worker to pull KV
// blocks from a peer, and speaks the kv.fetch hint on both sides of the wire.
//
// The router side: ParseCapability reads what workers advertise, Select
// applies docs/wire.md §6.1 (Dynamo's best_source) and asks a Policy whether the pull
// beats a recompute, AppendEnvelope/Attach put the hint in the request body,
// and Strip removes hints clients sent themselves. The consumer side (the
// simulated engine, as vLLM and SGLang do): Extract finds a hint where an
// engine reads it and Parse reads it with KVCR's rules. Scoping hints to a
// request is the runner's (runner.SubmitHint).
//
// Everything here is pure: no I/O, clocks or goroutines.
package hints
