package gateway

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"kvrouter/internal/index"
	kvingest "kvrouter/internal/ingest"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvstream"
	"kvrouter/internal/router"
)

// fullAttention is vLLM's kv_cache_spec_kind of the group routing follows:
// hybrid models emit one stream per KV group and only this one keys the
// prefix by tokens alone.
const fullAttention = "full_attention"

// ingest applies one engine's KV event stream (no state agent) to the
// router. An engine has no snapshot to offer, so the rules differ from a
// relay's: a gap makes the affected ranks unready until healed; a loss
// or a publisher restart clears them, and what arrives next is all the
// router knows.
type ingest struct {
	id string
	dp int
	tp int // TP ranks per DP rank: above 1, runner inventory comes per shard
	// sglang: the worker is known to run SGLang, whose stores all name
	// their salt, so none is inherited (and no map of salted blocks kept).
	sglang bool
	sink   *router.Sink
	m      *Metrics
	log    *slog.Logger
	now    func() time.Time
	dec    kvevents.Decoder

	once sync.Map // warnings logged once per reason
	// sharded: the engine reports runner inventory per TP rank, which a
	// worker without tp= cannot fold. A replayed batch names no shard, so
	// its runner stores are one shard's at best.
	sharded atomic.Bool

	// What a rank's later events need from its earlier ones (vLLM): KV
	// group kinds learnt from stores, and the salts of blocks under
	// salted roots. Ranks may be followed on goroutines of their own.
	mu     sync.Mutex
	groups kvingest.GroupKinds   // the worker's, shared by its ranks
	salts  []kvingest.SaltChains // per DP rank; nil for SGLang
	// With tp > 1, per DP rank, its TP shards' runner inventories folded
	// into its cache owner's: a peer pulling a block needs every shard.
	aggs []*kvingest.Aggregator
}

// newEngineIngest returns the ingest of spec's events into sink.
func newEngineIngest(spec WorkerSpec, sink *router.Sink, m *Metrics, log *slog.Logger, now func() time.Time) *ingest {
	in := &ingest{id: spec.ID, dp: spec.DP, tp: max(spec.TP, 1), sglang: spec.Engine == router.EngineSGLang,
		sink: sink, m: m, log: log, now: now}
	if !in.sglang {
		in.salts = make([]kvingest.SaltChains, in.dp)
	}
	if in.tp > 1 {
		in.aggs = make([]*kvingest.Aggregator, in.dp)
		for r := range in.aggs {
			in.aggs[r] = kvingest.NewAggregator(in.tp)
		}
	}
	return in
}

// lineage gives ev what it needs from the rank's earlier events: false
// when its KV group is not the full-attention one (a hybrid model's other
// groups are not followed), else, for vLLM, the salt of the chain it
// extends.
func (in *ingest) lineage(rank int, ev *kvevents.Event) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if kind := in.groups.Of(ev); kind != "" && kind != fullAttention {
		return false
	}
	if !in.sglang {
		in.salts[rank].Inherit(ev)
	}
	return true
}

// handle applies one item. rank is the DP rank the stream belongs to, or
// -1 when batches say (one bind-mode socket for every rank).
func (in *ingest) handle(it kvstream.Item, rank int) {
	switch v := it.(type) {
	case kvstream.Message:
		in.batch(v, rank)
	case kvstream.Gap:
		if v.Healed {
			in.setReady(rank, true)
			return
		}
		in.m.eventGaps.WithLabelValues("gap").Inc()
		in.setReady(rank, false)
	case kvstream.Unrecoverable:
		in.m.eventGaps.WithLabelValues("unrecoverable").Inc()
		in.clear(rank)
	case kvstream.Restart:
		in.m.eventGaps.WithLabelValues("restart").Inc()
		in.clear(rank)
	case kvstream.Reconnected:
		// A seq that moves on after a reconnect does not prove the same
		// publisher: a restarted engine that has sent more batches than we
		// last saw passes for a gap, and its replay would land on the old
		// process's blocks. Start over, as the state agent does.
		in.m.eventGaps.WithLabelValues("reconnect").Inc()
		in.clear(rank)
	}
}

func (in *ingest) ranks(rank int) []int {
	if rank >= 0 {
		return []int{rank}
	}
	out := make([]int, in.dp)
	for i := range out {
		out[i] = i
	}
	return out
}

func (in *ingest) sources(rank int) []index.Source {
	var out []index.Source
	for _, r := range in.ranks(rank) {
		out = append(out, index.WorkerRank(in.id, r), index.CacheOwner(FlagOwner(in.id, r)))
	}
	return out
}

func (in *ingest) setReady(rank int, ready bool) {
	for _, src := range in.sources(rank) {
		in.sink.SetReady(src, ready)
	}
}

// clear forgets what the ranks held: removals may be among the lost
// batches, and a stale block is worse than a missing one.
func (in *ingest) clear(rank int) {
	for _, src := range in.sources(rank) {
		in.sink.Clear(src)
		in.sink.SetReady(src, true)
	}
	in.mu.Lock()
	for _, r := range in.ranks(rank) {
		if in.salts != nil {
			in.salts[r] = nil
		}
		if in.aggs != nil {
			// The owner was cleared with it: the shards start over too.
			in.aggs[r].Reset()
		}
	}
	in.mu.Unlock()
}

func (in *ingest) batch(m kvstream.Message, rank int) {
	b, err := in.dec.Decode(m.Payload)
	if err != nil {
		// Its removals are lost with it: the ranks it may concern start
		// over, as after a loss.
		in.m.eventDropped.WithLabelValues("malformed").Inc()
		in.warnOnce("malformed", "events: a batch does not decode; clearing what the router knew of the worker's ranks it may concern", "err", err)
		in.clear(rank)
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
	_, tp, shard := kvevents.ParseRunnerShardTopic(m.Topic)
	if m.Replayed {
		// Replay frames carry no topic: kvstream stamps a replayed batch
		// with the topic of the live message that opened its gap. A shard
		// topic there says the engine shards (even if no live shard batch
		// got through yet), not which shard this batch is.
		if shard {
			in.sharded.Store(true)
		}
		tp, shard = 0, false
	}
	if shard && (in.aggs == nil || tp >= in.tp) {
		// One shard's runner inventory is not the rank's: applied to the
		// owner it would offer blocks other shards lack.
		in.m.eventDropped.WithLabelValues("tp_shard").Add(float64(len(b.Events)))
		if in.aggs == nil {
			in.sharded.Store(true)
			in.warnOnce("tp_shard", "events: the engine reports runner inventory per TP rank; dropping it until the worker says how many: set tp= (the engine's tensor-parallel size) in --worker, or run the state agent (kvrouter agent) beside the engine",
				"topic", m.Topic)
		} else {
			in.warnOnce("tp_shard", "events: a runner shard topic names a TP rank beyond the worker's tp=; dropping it: set tp= in --worker to the engine's tensor-parallel size",
				"topic", m.Topic, "tp", in.tp)
		}
		return
	}
	owner := index.CacheOwner(FlagOwner(in.id, rank))
	for _, ev := range b.Events {
		if !in.lineage(rank, &ev) {
			in.m.eventDropped.WithLabelValues("kv_group").Inc()
			continue
		}
		op, err := index.OpFromEvent(ev)
		if err != nil {
			reason := "invalid"
			if errors.Is(err, index.ErrPlaceholder) {
				reason = "placeholder"
			}
			in.m.eventDropped.WithLabelValues(reason).Inc()
			continue
		}
		switch {
		case !shard && ev.Ownership != kvevents.OwnedByRunner:
			in.apply(index.WorkerRank(in.id, rank), op)
		case in.aggs == nil && m.Replayed && in.sharded.Load() && op.Kind == index.OpStore:
			// Maybe one shard's, like the live ones dropped above; a
			// removal only withdraws what the owner may not have.
			in.m.eventDropped.WithLabelValues("tp_shard").Inc()
		case in.aggs == nil:
			in.apply(owner, op)
		case shard:
			in.fold(rank, tp, owner, op)
		case op.Kind == index.OpStore:
			// Runner inventory without its shard (replayed, or on the
			// plain topic): leaving one shard's store out only
			// under-reports the rank.
			in.m.eventDropped.WithLabelValues("unattributed").Inc()
		default:
			// A removal or clear of an unknown shard withdraws the blocks
			// from every shard: under-reporting is safe, keeping a block a
			// shard dropped is not.
			for t := range in.tp {
				in.fold(rank, t, owner, op)
			}
		}
	}
}

// fold feeds op of TP shard tp to the rank's aggregator and applies what
// the owner gains or loses.
func (in *ingest) fold(rank, tp int, owner index.Source, op index.Op) {
	in.mu.Lock()
	out, err := in.aggs[rank].Apply(tp, op)
	in.mu.Unlock()
	if err != nil {
		in.refused(err)
		return
	}
	for _, o := range out {
		in.apply(owner, o)
	}
}

func (in *ingest) apply(src index.Source, op index.Op) {
	if err := in.sink.Apply(src, []index.Op{op}); err != nil {
		in.refused(err)
	}
}

// refused counts an op the index (or a rank's aggregator) refused.
func (in *ingest) refused(err error) {
	switch {
	case errors.Is(err, index.ErrUnknownParent):
		// Blocks stored under a parent from before the router joined;
		// they become known as prefixes come round again.
		in.m.eventDropped.WithLabelValues("unknown_parent").Inc()
	case errors.Is(err, index.ErrBlockSize):
		in.m.eventDropped.WithLabelValues("block_size").Inc()
		in.warnOnce("block_size", "events: the engine's block size differs from the worker's; set block_size= in --worker",
			"err", err)
	default:
		in.m.eventDropped.WithLabelValues("rejected").Inc()
	}
}

func (in *ingest) warnOnce(key, msg string, args ...any) {
	if _, loaded := in.once.LoadOrStore(key, true); !loaded {
		in.log.Warn(msg, append([]any{"worker", in.id}, args...)...)
	}
}
