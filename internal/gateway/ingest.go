package gateway

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"kvrouter/internal/index"
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
	// sglang: the worker is known to run SGLang, whose stores all name
	// their salt, so none is inherited (and no map of salted blocks kept).
	sglang bool
	sink   *router.Sink
	m      *Metrics
	log    *slog.Logger
	now    func() time.Time
	dec    kvevents.Decoder

	once sync.Map // warnings logged once per reason

	// groups maps a hybrid model's KV group (group_idx) to its spec kind,
	// learnt from stores: vLLM's removals name the group only, and a
	// sliding-window group's removal of a hash the full-attention group
	// shares must not remove the block.
	groups sync.Map // int → string

	// salts keeps, by rank, the salt of each block under a salted vLLM
	// root: vLLM names the salt in a prefix's first block only.
	saltMu sync.Mutex
	salts  map[int]map[uint64]string
}

// inheritSalt gives a store the salt of the chain it extends and keeps the
// rank's salted blocks in step with removals and clears (a removal forgets
// a hash another tier may still hold: a store under it then goes
// unsalted, which matches less but never across tenants).
func (in *ingest) inheritSalt(rank int, ev *kvevents.Event) {
	in.saltMu.Lock()
	defer in.saltMu.Unlock()
	m := in.salts[rank]
	switch ev.Kind {
	case kvevents.KindStored:
		if ev.CacheSalt == "" && ev.HasParent {
			ev.CacheSalt = m[ev.ParentHash]
		}
		if ev.CacheSalt == "" {
			return
		}
		if m == nil {
			if in.salts == nil {
				in.salts = map[int]map[uint64]string{}
			}
			m = map[uint64]string{}
			in.salts[rank] = m
		}
		for _, h := range ev.BlockHashes {
			m[h] = ev.CacheSalt
		}
	case kvevents.KindRemoved:
		for _, h := range ev.BlockHashes {
			delete(m, h)
		}
	case kvevents.KindCleared:
		delete(in.salts, rank)
	}
}

// handle applies one item. rank is the DP rank the stream belongs to, or
// -1 when batches say (one bind-mode socket for every rank).
func (in *ingest) handle(it kvstream.Item, rank int) {
	switch v := it.(type) {
	case kvstream.Message:
		in.batch(v.Payload, rank)
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
		in.m.eventGaps.WithLabelValues("reconnect").Inc()
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
	in.saltMu.Lock()
	for _, r := range in.ranks(rank) {
		delete(in.salts, r)
	}
	in.saltMu.Unlock()
}

func (in *ingest) batch(payload []byte, rank int) {
	b, err := in.dec.Decode(payload)
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
	for _, ev := range b.Events {
		kind := ev.SpecKind
		if ev.Kind == kvevents.KindStored && kind != "" {
			in.groups.Store(ev.GroupIdx, kind)
		} else if kind == "" && ev.Kind == kvevents.KindRemoved {
			if k, ok := in.groups.Load(ev.GroupIdx); ok {
				kind = k.(string)
			}
		}
		if kind != "" && kind != fullAttention {
			in.m.eventDropped.WithLabelValues("kv_group").Inc()
			continue
		}
		if !in.sglang {
			in.inheritSalt(rank, &ev)
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
		src := index.WorkerRank(in.id, rank)
		if ev.Ownership == kvevents.OwnedByRunner {
			src = index.CacheOwner(FlagOwner(in.id, rank))
		}
		if err := in.sink.Apply(src, []index.Op{op}); err != nil {
			switch {
			case errors.Is(err, index.ErrUnknownParent):
				// Blocks stored under a parent from before the router
				// joined; they become known as prefixes come round again.
				in.m.eventDropped.WithLabelValues("unknown_parent").Inc()
			case errors.Is(err, index.ErrBlockSize):
				in.m.eventDropped.WithLabelValues("block_size").Inc()
				in.warnOnce("block_size", "events: the engine's block size differs from the worker's; set block_size= in --worker",
					"err", err)
			default:
				in.m.eventDropped.WithLabelValues("rejected").Inc()
			}
		}
	}
}

func (in *ingest) warnOnce(key, msg string, args ...any) {
	if _, loaded := in.once.LoadOrStore(key, true); !loaded {
		in.log.Warn(msg, append([]any{"worker", in.id}, args...)...)
	}
}
