// Package hints decides when the router tells a target worker to pull KV
// blocks from a peer, and speaks the kv.fetch hint on both sides of the wire.
//
// The router side: ParseCapability reads what workers advertise, Select
// applies SPEC 5 (Dynamo's best_source) and asks a Policy whether the pull
// beats a recompute, AppendEnvelope/Attach put the hint in the request body,
// and Strip removes hints clients sent themselves. The consumer side (our
// runner and simulated engine): Extract and Parse read a hint with KVCR's
// rules, and Book scopes hints to one request.
//
// Everything here is pure: no I/O, clocks or goroutines.
package hints
