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
// zmq4 has no heartbeats: an engine whose host vanishes leaves its stream
// silent, not broken. The agent probes the engine's /health; once probes
// fail for --engine-grace the rank's sources are reset and not ready (a
// dead engine's runners cannot serve pulls either), until the engine
// answers again and its stream delivers a batch. A lost NATS connection is
// redialed by nats.go; messages committed meanwhile may be lost, which
// consumers notice from the cursor and repair with a snapshot; the lease
// refresh is retried and a lapsed registration reappears at the next one.
package agent
