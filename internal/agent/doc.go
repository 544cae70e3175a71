// Package agent is the state agent that runs beside one engine worker
// (`kvrouter agent`): it reads and validates the worker's configuration,
// registers the worker in discovery with a lease, and relays the worker's
// KV inventory from the engine's raw event streams to the event plane.
//
// # Sources and ordering
//
// Framework-owned blocks belong to the worker's DP rank, index.WorkerRank
// (worker, global DP rank); runner-owned blocks to the rank's cache owner,
// index.CacheOwner(owner id). A worker without owners (no runner, or a
// topology refused for hints) relays only its worker-owned blocks. With
// inventory aggregation "all_tp_ranks" and more than one TP rank, the TP
// ranks' runner shards are folded. Which event goes where, and when a rank
// is in order or reset, is the ingest core's (internal/ingest): Core
// converts each stream item, decodes its payload, steps the core, and is
// its output.
//
// # Attached and detached sources
//
// A source is attached, meaning every change is committed to the event
// plane together with the change to the local index
// (relay.Publisher.Commit), while the ingest core holds it ready.
// Otherwise it is detached: KindReset told consumers to drop it and hold
// it not ready, snapshots show it empty and not ready, and the agent keeps
// applying events locally without publishing. Attaching publishes the
// local dump and then KindReady; a reset of an attached source publishes
// KindReset and, the source staying ready, KindReady. A consumer thus
// never sees a store after its clear out of order, and never a source
// ready while the agent cannot vouch for it; and only ops the local index
// accepted are ever published.
//
// # Engine and NATS outages
//
// An engine whose host vanishes leaves its stream silent, not broken. The
// agent probes the engine's /health; once probes fail for --engine-grace
// the rank's worker source is reset and not ready, until the engine
// answers again and its stream delivers a batch.
//
// # Cache owners and their runners
//
// A cache owner's inventory is its runners': the runner prober
// (runnerprobe, shared with serve's --worker runners) pings each runner's
// control endpoint every --runner-probe for its start epoch. An
// engine restart, reconnect or outage leaves the owner's inventory in
// place, detached until every runner has answered again; a runner with a
// new epoch, or one silent for --owner-ttl, has it dropped. Without the
// prober the owner is reset with its engine.
//
// # Start and stop
//
// At start each rank catches up on its engine's history before any live
// batch: the engine's snapshot-v1 cut where it offers one, then its
// replay buffer from seq 0. An engine with a cut that comes back (its
// stream reconnected or restarted: maybe a new process) is caught up on
// that way again, its new cut first (kvstream.Follow); any other is caught
// up on from seq 0 at a reconnect, which an idle engine's stream would
// never ask for. On a clean stop the agent stops reading its
// engines, announces gone every worker rank and every owner that is not
// ready, flushes NATS and only then deregisters, so a router that reads
// the deregistration has been sent the rest (docs/wire.md §9.6). A lost NATS connection is
// redialed by nats.go; messages committed meanwhile may be lost, which
// consumers notice from the cursor and repair with a snapshot; the lease
// refresh is retried and a lapsed registration reappears at the next one.
package agent
