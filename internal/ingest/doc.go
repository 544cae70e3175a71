// Package ingest owns the job "engine stream → ordered inventory ops": it
// turns the KV event streams of one worker's DP ranks into the changes,
// resets and readiness of the worker's sources (index.WorkerRank for
// framework-owned blocks, index.CacheOwner for the runner's).
//
// It is a pure state machine in the style of etcd's raft: no sockets,
// goroutines or clocks. Two drivers feed it, each serialising its calls:
// the state agent (internal/agent: its local index, published through the
// event plane, is the Output) and serve's direct ingest for --worker and
// --events-bind fleets (internal/direct: the router's sink is the Output). A driver decodes payloads at the edge and steps a rank with a
// Batch or with one of the stream's signals (Gap, Unrecoverable, Restart,
// Reconnected, Engine); the core calls its Output's Apply, Reset, Ready
// and Count.
//
// # Sources
//
// Framework-owned blocks belong to the rank's worker source, runner-owned
// ones (vLLM ownership "kvcr", SGLang medium "EXTERNAL") to its cache
// owner; a rank without one counts them dropped. With Config.TP above 1,
// each TP rank's runner reports its shard on a runner shard topic
// (kvevents.RunnerShardTopic) and the owner holds a block only while every
// shard does (aggregator). Runner events naming no shard (the plain topic,
// or a replayed batch, whose frames carry no topic) cannot be attributed:
// their stores are left out and their removals and clears withdraw from
// every shard, which can only make the owner hold less. With TP at most 1
// a shard topic is rejected, and once one was seen, replayed runner stores
// are left out too. Stores under a salted vLLM root inherit its salt
// (Config.InheritSalt); a hybrid model's other KV groups are left out.
//
// # Ordering, resets and batches
//
// A rank's sources are ready while its stream is in order: a batch arrived
// since the start, the last reconnect or the engine's return, no gap is
// open, and the engine is up.
//
//   - Gap: not ready; replayed batches still apply; Healed, once every
//     open gap is, makes them ready again.
//   - Unrecoverable (replay could not heal), Restart (seq went backwards),
//     a new SGLang epoch, Reconnected, a rejected batch, the engine down:
//     reset, that is empty the rank's sources and rebuild from the next
//     batch. After a Reconnected or the engine's return the sources are
//     not ready until a batch arrives.
//   - A store naming a parent its source does not hold is skipped, never
//     attached at the root. On a worker stream known to be complete (first
//     seq 0 or a restart to 0, nothing skipped since, no other KV group)
//     it reveals a batch lost without a seq gap, and resets the rank,
//     unless the output may drop blocks itself (Config.Lossy).
//   - A batch is converted whole before anything applies: one event the
//     worker cannot take (malformed payload, another block size, an event
//     that does not convert, a shard topic it does not fold) rejects the
//     whole batch, which is counted, and resets the rank, since it may
//     have carried removals. Ops then go out in groups that start at a
//     store under a parent, the one op an index refuses for what it holds,
//     so a refused group changed nothing.
//
// # Cache owners outlive their engine
//
// A cache owner's blocks live in its runners' DRAM, which may outlive the
// engine process. With Config.ProbeRunners a runner prober reports each
// TP rank's runner (Runner: up with its start epoch, down, or expired
// past the owner TTL), and the engine-level signals (Restart, a new epoch,
// Reconnected, the engine down) reset the worker source only: the owner
// keeps its inventory, not ready until every runner has answered again.
// A runner answering with a new epoch (a new process, empty) or expiring
// resets the owner alone; a runner down makes it not ready, inventory
// kept. Losses (Unrecoverable, a rejected batch, a silent gap) reset both:
// the runner's removals travel on the engine's stream. Without a prober
// nothing says a runner outlived its engine, and the owner is reset with
// the worker.
//
// # The engine's snapshot
//
// A driver that fetched the engine's snapshot (SGLang snapshot-v1) steps
// it before the first batch of the engine process: at start, and after a
// Restart or a Reconnected (which emptied the worker source), when it
// fetches the cut of the engine that came back and replays that engine's
// history from seq 0 again. One stepped later is ignored. The snapshot
// names the blocks the
// engine held at its barrier (ResumeSeq-1) by engine hash only, without
// tokens, so the core takes their identities from the history before the
// cut (the replay buffer from seq 0), which the cut does not prune: the
// engine's mirror is keyed by hash whatever the medium, so it drops a block
// one medium removed while another holds it. The rank is not
// ready until the stream reaches the cut (the barrier batch, or the first
// batch past it); after it, a batch below ResumeSeq is a duplicate
// (DropDuplicate). Live batches carry the snapshot's epoch. A reset drops
// a pending cut: the rank rebuilds as without one.
//
// A rebuilt source is safe to hint from: it started empty, and every
// batch since was applied in order or it would have been reset again;
// what it misses was stored before the reset, and under-reporting only
// shortens hints.
//
// # What the two drivers did differently before
//
// The agent and serve each had an ordering machine of their own. One now
// serves both, with the safer rule where they differed: a batch with a bad
// event is rejected whole and its rank reset (serve dropped the event and
// applied the rest); a shard topic beyond the TP ranks folded resets the
// rank (serve dropped the batch alone; the agent took shard 0 of a TP 1
// worker as the owner's, now rejected as serve did); sources are not ready
// before their stream's first batch nor after a reconnect until the next
// (serve's were ready at once); healing one gap leaves the rank not ready
// while another is open, and a loss only resolves the gaps it overlaps
// (serve made the rank ready at any heal or loss); a new SGLang epoch resets (serve did
// not look); KV-group kinds are learnt per rank (serve shared them across
// ranks); events left out for their owner or shard still carry their salt
// to later stores (the agent skipped them). Serve's output is Lossy, since
// the router's index may evict (--max-blocks).
package ingest
