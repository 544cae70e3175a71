// Package agent is the state agent that runs beside one engine worker
// (`kvrouter agent`): it reads and validates the worker's configuration,
// registers the worker in discovery with a lease, and relays the worker's
// KV inventory from the engine's raw event streams to the event plane.
//
// # Sources
//
// Framework-owned blocks (no ownership, GPU/host/disk mediums) belong to the
// worker's DP rank, index.WorkerRank(worker, global DP rank). Runner-owned
// blocks (vLLM ownership "kvcr", SGLang linker medium "EXTERNAL") belong to
// the rank's cache owner, index.CacheOwner(owner id). A worker without
// owners (no runner, or a topology refused for hints) relays only its
// worker-owned blocks and counts runner events as dropped.
//
// With inventory aggregation "all_tp_ranks" and more than one TP rank, each
// TP rank's runner publishes its shard under kvevents.RunnerShardTopic; an
// Aggregator gives the owner a block only while all shards hold it. Runner
// events that name no shard (the engine's plain topic, or a replayed batch,
// whose frames carry no topic) cannot be attributed: their stores are left
// out and their removals and clears are applied to every shard, which can
// only make the owner hold less.
//
// # Ordering and resets
//
// Each DP rank's stream runs a small state machine (Core). Its sources are
// attached, meaning every change is committed to the event plane together
// with the change to the local index (relay.Publisher.Commit), while the
// stream is in order: a message arrived since the start, the last
// reconnect or the engine's return, no gap is open, and the engine passes
// its health checks. Otherwise they are detached: KindReset told consumers
// to drop them and hold them not ready, snapshots show them empty and not
// ready, and the agent keeps applying events locally without publishing.
// Attaching publishes the local dump and then KindReady. A consumer thus
// never sees a store after its clear out of order, and never a source ready
// while the agent cannot vouch for it.
//
//   - Gap opened (kvstream replays it): detach, keep the local state.
//     Replayed batches are applied locally; Healed re-attaches.
//   - Unrecoverable (replay could not heal), Restart (seq went backwards),
//     a new SGLang publisher epoch, Reconnected (a forward seq after a
//     reconnect does not prove the same publisher process), a rejected
//     batch (it may have carried removals), the engine down past
//     --engine-grace: reset, that is empty the rank's sources, locally and
//     at consumers, and rebuild from the next batch.
//   - A store naming a parent its source does not hold is refused by the
//     index and skipped, never attached at the root. On a worker stream
//     known to be complete (the first seq seen was 0, or a restart to 0,
//     and nothing was skipped since: no placeholder, no hybrid group) such a
//     store reveals a batch lost without a seq gap, and resets the rank.
//     Runner-owned sources are never complete: their blocks can outlive
//     the publisher process.
//
// Why a rebuilt source is safe to hint from: after a reset it starts empty,
// and from then on the agent has applied every batch of the stream in seq
// order, or it would have reset again. Every block it believes held was
// therefore stored by an event after the reset, under a parent it also
// holds (or at the root, as the engine said), so the block's identity is
// that of the engine's prefix; and every removal and clear the engine
// published since has been applied to it. What it misses is what was stored
// before the reset; under-reporting only shortens hints.
//
// Batches are converted whole before anything is applied, and a batch with
// a malformed payload, a foreign block size or an unconvertible event is
// rejected whole. Within a batch, ops of one source are committed in groups
// that start at a store under a parent (the only op the index may refuse,
// and it refuses it whole), so a refused group changed nothing and only ops
// the local index accepted are ever published.
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
