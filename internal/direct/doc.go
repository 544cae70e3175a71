// Package direct brings up the router service's --worker engines, the
// fleets without state agents: it learns each engine's model, registers
// it with the routing decision core, and ingests the engine's own KV event
// stream, dialed (events=) or taken on --events-bind, into the core. A
// worker whose events never arrive is routed in approximate mode.
//
// Each rank catches up on its engine's history at once, without waiting
// for a live batch an idle engine never sends: at start from the engine's
// snapshot-v1 cut (SGLang, snapshot=) and then its replay buffer from seq
// 0 (replay=), and at a reconnect on what the engine sent while the
// connection was down. An engine with snapshot= that comes back (a
// reconnect or a restart: maybe a new process) is caught up on again as at
// start, its new cut first (kvstream.Follow).
//
// A worker given control= has runner-owned inventory, one cache owner per
// DP rank, whose runners are probed as the state agent probes its own
// (runnerprobe, --runner-probe, --owner-ttl): the owner keeps its
// inventory across an engine restart or reconnect while every runner
// answers with the epoch it had, is not a hint source while one does not
// answer, and is dropped when one restarts or stays silent past the TTL.
package direct
