// Package workload builds the requests a benchmark sends: a replay of a
// Mooncake trace (ReadMooncake) or a synthetic multi-turn agentic workload
// (Agentic). Both yield []Request sorted by arrival, with prompts as token
// ids so that equal prefixes are equal token for token, which is what makes
// them share KV cache blocks on any engine.
//
// Everything here is pure and deterministic: no I/O beyond the reader it is
// given, no clocks, no goroutines. Sending the requests is package loadgen's
// job.
package workload
