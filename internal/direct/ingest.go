// This file holds serve's direct ingest of a --worker engine's events: the ingest core into router.Sink.

package direct

import (
	"log/slog"
	"sync"
	"time"

	"kvrouter/internal/index"
	kvingest "kvrouter/internal/ingest"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvstream"
	"kvrouter/internal/router"
)

// ingest applies one engine's KV event stream (no state agent) to the
// router through the ingest core, which decides; the router's sink is its
// output. A rank catches up from its engine's snapshot-v1 cut (SGLang,
// snapshot=) and replay buffer (replay=), at start and when the engine
// comes back (see the package doc); what a rank lost otherwise, it starts
// over from, and what arrives next is all the router knows.
type ingest struct {
	id   string
	dp   int
	tp   int
	sink *router.Sink
	m    *Metrics
	log  *slog.Logger
	now  func() time.Time
	dec  kvevents.Decoder

	once sync.Map // warnings logged once per reason
	// mu serialises the core: a worker's ranks may be followed on
	// goroutines of their own.
	mu   sync.Mutex
	core *kvingest.Core
}

var _ kvingest.Output = (*ingest)(nil)
var _ kvingest.Identifier = (*ingest)(nil)

// droppedLabel is the kvrouter_events_dropped_total label of the core's
// rejections and drops.
var droppedLabel = [kvingest.NumReasons]string{
	// RejectMalformed is counted where the batch is decoded: once, though
	// a bind-mode batch that names no rank is stepped into every rank.
	kvingest.RejectBlockSize: "block_size", kvingest.RejectEvent: "invalid", kvingest.RejectTopic: "tp_shard",
	kvingest.DropPlaceholder: "placeholder", kvingest.DropOtherGroup: "kv_group", kvingest.DropNoOwner: "no_owner",
	kvingest.DropUnattributed: "unattributed", kvingest.DropUnknownParent: "unknown_parent", kvingest.DropInvalid: "rejected",
	kvingest.DropDuplicate: "duplicate",
}

// newEngineIngest returns the ingest of spec's events into sink. The
// worker's sources are not ready until their stream delivers a batch.
// probed says a runner prober reports the ranks' runners (Runner inputs,
// one per TP rank): their owners then outlive the engine.
func newEngineIngest(spec WorkerSpec, sink *router.Sink, m *Metrics, log *slog.Logger, now func() time.Time, probed bool) *ingest {
	in := &ingest{id: spec.ID, dp: spec.dp, tp: max(spec.tp, 1), sink: sink, m: m, log: log, now: now}
	cfg := kvingest.Config{
		BlockSize: spec.blockSize, TP: in.tp, ProbeRunners: probed, Runners: in.tp,
		// SGLang's stores all name their salt; vLLM's only a prefix's first.
		InheritSalt: spec.engine != router.EngineSGLang,
		// The router's index may evict (--max-blocks), so an unknown parent
		// proves no lost batch there.
		Lossy: true,
		Log:   log.With("worker", spec.ID),
	}
	for r := range in.dp {
		rk := kvingest.Rank{DP: r, Worker: index.WorkerRank(spec.ID, r), Owner: index.CacheOwner(flagOwner(spec.ID, r)), HasOwner: true}
		cfg.Ranks = append(cfg.Ranks, rk)
		sink.SetReady(rk.Worker, false)
		sink.SetReady(rk.Owner, false)
	}
	core, err := kvingest.New(cfg, in)
	if err != nil {
		// Unreachable: the sink exists, so the router accepted the worker,
		// whose block size and DP size it checks positive.
		panic("direct: " + err.Error())
	}
	in.core = core
	return in
}

// handle applies one item. rank is the DP rank the stream belongs to, or
// -1 when batches say (one bind-mode socket for every rank).
func (in *ingest) handle(it kvstream.Item, rank int) {
	switch v := it.(type) {
	case kvstream.Message:
		in.batch(v, rank)
	case kvstream.Gap:
		if !v.Healed {
			in.m.eventGaps.WithLabelValues("gap").Inc()
		}
		in.step(rank, kvingest.Gap{From: v.From, To: v.To, Healed: v.Healed})
	case kvstream.Unrecoverable:
		in.m.eventGaps.WithLabelValues("unrecoverable").Inc()
		in.step(rank, kvingest.Unrecoverable{From: v.From, To: v.To})
	case kvstream.Restart:
		in.m.eventGaps.WithLabelValues("restart").Inc()
		in.step(rank, kvingest.Restart{OldSeq: v.OldSeq, NewSeq: v.NewSeq})
	case kvstream.Reconnected:
		in.m.eventGaps.WithLabelValues("reconnect").Inc()
		in.step(rank, kvingest.Reconnected{})
	}
}

// snapshot hands rank's engine snapshot to the core, before its stream.
func (in *ingest) snapshot(rank int, s *kvstream.Snapshot) {
	in.step(rank, kvingest.Snapshot{Epoch: kvstream.EpochSuffix(s.Header.Epoch), ResumeSeq: s.Header.ResumeSeq, Blocks: s.Blocks})
}

// step feeds x to the core for rank, or for every rank when rank is -1.
func (in *ingest) step(rank int, x kvingest.Input) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for r := range in.dp {
		if rank < 0 || r == rank {
			_ = in.core.Step(r, x) // r is one of the core's ranks
		}
	}
}

func (in *ingest) batch(m kvstream.Message, rank int) {
	b, err := in.dec.Decode(m.Payload)
	if err != nil {
		// Its removals are lost with it: the core rejects it and the ranks
		// it may concern start over.
		in.m.eventDropped.WithLabelValues("malformed").Inc()
		in.warnOnce("malformed", "events: a batch does not decode; clearing what the router knew of the worker's ranks it may concern", "err", err)
		in.step(rank, kvingest.Batch{Topic: m.Topic, Epoch: kvstream.TopicEpoch(m.Topic), Seq: m.Seq, Replayed: m.Replayed, Err: err})
		return
	}
	if b.TS > 0 {
		lag := in.now().Sub(time.Unix(0, int64(b.TS*1e9)))
		if lag >= 0 {
			in.m.eventLag.Observe(lag.Seconds())
		}
	}
	if rank < 0 {
		rank = 0
		if b.HasDPRank {
			rank = b.DPRank
		}
	}
	if rank < 0 || rank >= in.dp {
		in.m.eventDropped.WithLabelValues("rank").Inc()
		in.warnOnce("rank", "events: batch names a DP rank outside the worker's dp=", "rank", rank, "dp", in.dp)
		return
	}
	in.step(rank, kvingest.Batch{Topic: m.Topic, Epoch: kvstream.TopicEpoch(m.Topic), Seq: m.Seq, Replayed: m.Replayed, Events: b.Events})
}

// Apply applies ops of src to the router.
func (in *ingest) Apply(src index.Source, ops []index.Op) error { return in.sink.Apply(src, ops) }

// Ident says the identity and depth of a block src holds.
func (in *ingest) Ident(src index.Source, e uint64) (uint64, uint32, bool) {
	return in.sink.Ident(src, e)
}

// Reset empties src, keeping its readiness.
func (in *ingest) Reset(src index.Source) { in.sink.Clear(src) }

// Ready marks src usable (or not) as a hint source.
func (in *ingest) Ready(src index.Source, ready bool) { in.sink.SetReady(src, ready) }

// Count counts r in the router's metrics, with a hint at the --worker key
// to fix the first time a misconfiguration shows.
func (in *ingest) Count(r kvingest.Reason) {
	switch r {
	case kvingest.RejectTopic:
		if in.tp <= 1 {
			in.warnOnce("tp_shard", "events: the engine reports runner inventory per TP rank; rejecting it until the worker says how many: set tp= (the engine's tensor-parallel size) in --worker, or run the state agent (kvrouter agent) beside the engine")
		} else {
			in.warnOnce("tp_shard", "events: a runner shard topic names a TP rank beyond the worker's tp=; rejecting it: set tp= in --worker to the engine's tensor-parallel size",
				"tp", in.tp)
		}
	case kvingest.RejectBlockSize:
		in.warnOnce("block_size", "events: the engine's block size differs from the worker's; set block_size= in --worker")
	case kvingest.ResetEpoch:
		in.m.eventGaps.WithLabelValues("epoch").Inc()
	}
	if l := droppedLabel[r]; l != "" {
		in.m.eventDropped.WithLabelValues(l).Inc()
	}
}

func (in *ingest) warnOnce(key, msg string, args ...any) {
	if _, loaded := in.once.LoadOrStore(key, true); !loaded {
		in.log.Warn(msg, append([]any{"worker", in.id}, args...)...)
	}
}
