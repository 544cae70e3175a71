package agent

import (
	"fmt"
	"log/slog"
	"slices"

	"kvrouter/internal/index"
	"kvrouter/internal/ingest"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvstream"
	"kvrouter/internal/relay"
	"kvrouter/internal/workerconfig"
)

// Core is the agent's state machine: it turns the items of each DP rank's
// engine event stream into changes of the local inventory and messages on
// the event plane. It is driven by one goroutine (Handle, SetEngineUp and
// Stop must not run concurrently); States, Stats and Readiness may be
// called from any goroutine. It owns no sockets, clocks or goroutines.
type Core struct {
	desc  *workerconfig.Descriptor
	plane Plane
	loc   *local
	ranks map[int]*rank // by global DP rank
	order []*rank       // DP rank order
	dec   kvevents.Decoder
	cnt   counters
	log   *slog.Logger
}

// rank is one DP rank's stream and the sources it feeds.
type rank struct {
	dp       int
	worker   index.Source
	owner    index.Source       // valid when hasOwner
	hasOwner bool               // false: no runner, or hints refused
	agg      *ingest.Aggregator // non-nil: runner inventory arrives per TP shard
	srcs     []index.Source

	// Ordering: the stream is in order when a message arrived since the
	// start (or a reconnect, or the engine's return), no gap is open and
	// the engine is up.
	waiting bool
	open    []gapSpan
	down    bool

	seen  bool   // a message arrived since the start
	epoch string // SGLang publisher epoch suffix of the last topic
	// complete: since the worker source was last emptied, every batch its
	// publisher process sent has been applied (the first seq seen was 0
	// and nothing was lost or skipped). Only then does an unknown parent
	// prove a gap the seq did not reveal.
	complete bool
	groups   ingest.GroupKinds // a hybrid model's KV groups, from stores
	salts    ingest.SaltChains // vLLM only: blocks under salted roots
}

type gapSpan struct{ from, to uint64 }

func (r *rank) inOrder() bool { return !r.waiting && len(r.open) == 0 && !r.down }

// NewCore returns the core of worker's agent for descriptor d, publishing
// through plane. Every source starts detached and not ready; a rank's
// sources become ready once its stream delivers a message.
func NewCore(worker string, d *workerconfig.Descriptor, plane Plane, log *slog.Logger) (*Core, error) {
	if log == nil {
		log = slog.Default()
	}
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	ix, err := index.New(index.Config{BlockSize: d.KVBlockSize})
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	c := &Core{desc: d, plane: plane, ranks: map[int]*rank{}, log: log}
	c.dec.Logger = log
	var all []index.Source
	for _, dp := range d.DPRanks {
		r := &rank{dp: dp, waiting: true, worker: index.WorkerRank(worker, dp)}
		r.srcs = []index.Source{r.worker}
		if id, ok := d.OwnerIDs[dp]; ok {
			r.owner, r.hasOwner = index.CacheOwner(id), true
			r.srcs = append(r.srcs, r.owner)
			if d.InventoryAggregation == workerconfig.AggregateAllTPRanks && d.TPRanksPerDPRank > 1 {
				r.agg = ingest.NewAggregator(d.TPRanksPerDPRank)
			}
		}
		all = append(all, r.srcs...)
		c.ranks[dp] = r
		c.order = append(c.order, r)
	}
	c.loc = newLocal(ix, all)
	return c, nil
}

// States returns the snapshot of every source; the plane calls it under its
// stream lock (relay.Publisher.ServeSnapshots).
func (c *Core) States() []relay.State { return c.loc.states() }

// Stats returns the counters.
func (c *Core) Stats() Stats { return c.cnt.snapshot() }

// DecoderStats returns the engine payload decoder's counters.
func (c *Core) DecoderStats() kvevents.Stats { return c.dec.Stats() }

// Readiness returns whether each source may be named by hints.
func (c *Core) Readiness() map[index.Source]bool { return c.loc.readiness() }

// Index is the local inventory (read-only use: Dump, Match).
func (c *Core) Index() *index.Index { return c.loc.ix }

// Handle feeds one item of DP rank dp's stream.
func (c *Core) Handle(dp int, item kvstream.Item) {
	r := c.ranks[dp]
	if r == nil {
		c.log.Error("agent: item for a DP rank the worker does not serve", "dp_rank", dp)
		return
	}
	switch it := item.(type) {
	case kvstream.Message:
		c.message(r, it)
	case kvstream.Gap:
		if !it.Healed {
			c.cnt.gaps.Add(1)
			r.open = append(r.open, gapSpan{it.From, it.To})
			c.log.Info("agent: event gap, sources not ready until replay resolves it", "dp_rank", dp, "from", it.From, "to", it.To)
		} else {
			c.cnt.healed.Add(1)
			r.open = removeSpans(r.open, func(g gapSpan) bool { return g.from == it.From && g.to == it.To })
		}
		c.sync(r)
	case kvstream.Unrecoverable:
		// A lost span resolves every open gap it overlaps: those gaps will
		// never be reported healed.
		r.open = removeSpans(r.open, func(g gapSpan) bool { return g.from <= it.To && g.to >= it.From })
		c.log.Warn("agent: events lost for good, rebuilding the rank's inventory", "dp_rank", dp, "from", it.From, "to", it.To)
		c.reset(r, ResetUnrecoverable)
		c.sync(r)
	case kvstream.Restart:
		c.log.Info("agent: engine publisher restarted, rebuilding the rank's inventory", "dp_rank", dp, "old_seq", it.OldSeq, "new_seq", it.NewSeq)
		r.open = nil
		c.reset(r, ResetRestart)
		// A new process starts with an empty cache: from its seq 0 on we
		// see its whole history.
		r.complete = it.NewSeq == 0
		// The new process's messages carry its own SGLang epoch: that is
		// the restart just handled, not another one.
		r.epoch = ""
		c.sync(r)
	case kvstream.Reconnected:
		// A seq that moves forward after a reconnect does not prove the
		// same publisher process: a restarted engine that sent more batches
		// than we last saw would pass for a gap, and its replay would be
		// applied on the old process's blocks. Start over.
		c.log.Info("agent: event stream reconnected, rebuilding the rank's inventory", "dp_rank", dp)
		c.reset(r, ResetReconnected)
		r.waiting = true
		r.epoch = "" // whatever epoch comes next is the one we start over from
		c.sync(r)
	}
}

// SetEngineUp reports the engine's health as judged by the liveness probe.
// A down engine's runners cannot serve pulls and its stream may have
// stopped without a sign, so its sources are reset and stay not ready until
// the engine is back and its stream delivers a message.
func (c *Core) SetEngineUp(up bool) {
	for _, r := range c.order {
		if up == !r.down {
			continue
		}
		if up {
			r.down, r.waiting = false, true
		} else {
			r.down = true
			c.reset(r, ResetEngineDown)
		}
		c.sync(r)
	}
}

// Stop announces that every source is gone: nobody will relay their
// changes anymore, so no consumer may keep hinting from them.
func (c *Core) Stop() {
	for _, r := range c.order {
		for _, s := range r.srcs {
			c.commit(s, relay.KindGone, nil, func() error { c.loc.set(s, false, false); return nil })
		}
	}
	c.loc.mu.Lock()
	c.loc.gone = true
	c.loc.mu.Unlock()
}

func (c *Core) message(r *rank, m kvstream.Message) {
	c.cnt.messages.Add(1)
	if !r.seen {
		r.seen = true
		r.complete = m.Seq == 0
	}
	// A runner shard's suffix follows the engine's whole topic, SGLang's
	// epoch suffix included: it comes off first, or it would read as part
	// of the epoch and every shard batch as a new one.
	base, tp, shard := kvevents.ParseRunnerShardTopic(m.Topic)
	key := kvstream.TopicKey(base)
	if epoch := base[len(key):]; !m.Replayed && epoch != r.epoch {
		if r.epoch != "" {
			c.log.Info("agent: engine publisher epoch changed, rebuilding the rank's inventory", "dp_rank", r.dp)
			c.reset(r, ResetEpoch)
		}
		r.epoch = epoch
	}
	r.waiting = false
	c.sync(r)

	b, err := c.dec.Decode(m.Payload)
	if err != nil {
		c.rejectBatch(r, RejectMalformed, m, err)
		return
	}
	c.cnt.events.Add(uint64(len(b.Events)))
	// A replayed batch comes without its topic (SPEC 2.1 replay frames):
	// kvstream stamps the topic of the live message that opened the gap, so
	// its TP shard is unknown.
	if m.Replayed {
		tp, shard = 0, false
	}
	p, reason, err := c.plan(r, b, tp, shard)
	if err != nil {
		c.rejectBatch(r, reason, m, err)
		return
	}
	c.apply(r, p.steps)
}

func (c *Core) rejectBatch(r *rank, reason string, m kvstream.Message, err error) {
	c.cnt.reject(reason)
	c.log.Warn("agent: engine batch rejected; its rank is rebuilt", "dp_rank", r.dp, "seq", m.Seq, "reason", reason, "err", err)
	c.reset(r, ResetRejected)
	c.sync(r)
}

// sync attaches or detaches r's sources to match its stream's order.
func (c *Core) sync(r *rank) {
	want := r.inOrder()
	for _, s := range r.srcs {
		switch attached := c.loc.isAttached(s); {
		case want && !attached:
			c.attach(s)
		case !want && attached:
			c.commit(s, relay.KindReset, nil, func() error { c.loc.set(s, false, false); return nil })
		}
	}
}

// attach publishes s's local state to consumers, which hold it empty and
// not ready, then marks it ready. The state does not change meanwhile (one
// goroutine drives the core), and a snapshot between the messages already
// shows all of it, which the remaining chunks re-store without effect.
func (c *Core) attach(s index.Source) {
	ops := c.loc.ix.Dump(s)
	for i := 0; i < len(ops); i += relay.MaxChunkOps {
		chunk := ops[i:min(i+relay.MaxChunkOps, len(ops))]
		c.commit(s, relay.KindOps, chunk, func() error { c.loc.set(s, true, false); return nil })
	}
	c.commit(s, relay.KindReady, nil, func() error { c.loc.set(s, true, true); return nil })
}

// reset empties the rank's sources and starts their rebuild. A source that
// holds nothing is left alone: consumers already mirror its empty state.
func (c *Core) reset(r *rank, reason string) {
	c.cnt.reset(reason)
	held := c.loc.ix.Sources()
	for _, s := range r.srcs {
		if !slices.Contains(held, s) {
			continue
		}
		if !c.loc.isAttached(s) {
			c.loc.ix.RemoveSource(s)
			continue
		}
		c.commit(s, relay.KindReset, nil, func() error {
			c.loc.ix.RemoveSource(s)
			c.loc.set(s, false, false)
			return nil
		})
	}
	r.complete = false
	r.salts = nil
	if r.agg != nil {
		r.agg.Reset()
	}
}

// commit runs change and publishes its message. A publish failure after
// the change was applied needs no repair here: the plane still spends the
// message's cursor and announces it (relay.Publisher.Commit), so consumers
// see that they miss it and resync from a snapshot.
func (c *Core) commit(src index.Source, kind relay.Kind, ops []index.Op, change func() error) error {
	applied := false
	err := c.plane.Commit(src, kind, ops, func() error {
		if err := change(); err != nil {
			return err
		}
		applied = true
		return nil
	})
	if applied {
		c.cnt.published[kind].Add(1)
		if err != nil {
			c.cnt.publishErrors.Add(1)
			c.log.Warn("agent: event plane publish failed; consumers will resync", "source", src, "err", err)
		}
		return nil
	}
	return err
}

func removeSpans(s []gapSpan, drop func(gapSpan) bool) []gapSpan {
	out := s[:0]
	for _, g := range s {
		if !drop(g) {
			out = append(out, g)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
