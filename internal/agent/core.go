// This file holds the agent's core: the ingest core, its output the local index and event plane.

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

// Core is the agent's state machine: the ingest core turns the items of
// each DP rank's engine event stream into changes of the local inventory,
// which Core commits to the event plane while consumers mirror a source.
// It is driven by one goroutine (Handle, SetEngineUp and Stop must not run
// concurrently); States, Stats and Readiness may be called from any
// goroutine. It owns no sockets, clocks or goroutines.
type Core struct {
	desc  *workerconfig.Descriptor
	plane Plane
	loc   *local
	ing   *ingest.Core
	dps   []int // DP ranks, in order
	dec   kvevents.Decoder
	cnt   counters
	log   *slog.Logger
}

var _ ingest.Output = (*output)(nil)
var _ ingest.Identifier = (*output)(nil)

// output is the ingest core's output side in the agent: the local index,
// and through the plane the consumers that mirror it.
type output Core

// CoreOption adjusts a Core.
type CoreOption func(*ingest.Config)

// ProbeRunners says the agent's runner prober reports the owners' runners
// (SetRunner), perRank of them for each DP rank: owners then outlive their
// engine (ingest.Config.ProbeRunners).
func ProbeRunners(perRank int) CoreOption {
	return func(c *ingest.Config) { c.ProbeRunners, c.Runners = true, perRank }
}

// NewCore returns the core of worker's agent for descriptor d, publishing
// through plane. Every source starts detached and not ready; a rank's
// sources become ready once its stream delivers a message.
func NewCore(worker string, d *workerconfig.Descriptor, plane Plane, log *slog.Logger, opts ...CoreOption) (*Core, error) {
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
	cfg := ingest.Config{BlockSize: d.KVBlockSize, TP: 1, InheritSalt: d.Engine == workerconfig.EngineVLLM, Log: log}
	if d.InventoryAggregation == workerconfig.AggregateAllTPRanks {
		cfg.TP = d.TPRanksPerDPRank
	}
	for _, o := range opts {
		o(&cfg)
	}
	var all []index.Source
	for _, dp := range d.DPRanks {
		r := ingest.Rank{DP: dp, Worker: index.WorkerRank(worker, dp)}
		all = append(all, r.Worker)
		if id, ok := d.OwnerIDs[dp]; ok {
			r.Owner, r.HasOwner = index.CacheOwner(id), true
			all = append(all, r.Owner)
		}
		cfg.Ranks = append(cfg.Ranks, r)
	}
	c := &Core{desc: d, plane: plane, loc: newLocal(ix, all), dps: slices.Clone(d.DPRanks), log: log}
	c.dec.Logger = log
	if c.ing, err = ingest.New(cfg, (*output)(c)); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
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
	var in ingest.Input
	switch it := item.(type) {
	case kvstream.Message:
		c.cnt.messages.Add(1)
		b, err := c.dec.Decode(it.Payload)
		if err == nil {
			c.cnt.events.Add(uint64(len(b.Events)))
		}
		in = ingest.Batch{Topic: it.Topic, Epoch: kvstream.TopicEpoch(it.Topic), Seq: it.Seq, Replayed: it.Replayed, Events: b.Events, Err: err}
	case kvstream.Gap:
		if it.Healed {
			c.cnt.healed.Add(1)
		} else {
			c.cnt.gaps.Add(1)
		}
		in = ingest.Gap{From: it.From, To: it.To, Healed: it.Healed}
	case kvstream.Unrecoverable:
		in = ingest.Unrecoverable{From: it.From, To: it.To}
	case kvstream.Restart:
		in = ingest.Restart{OldSeq: it.OldSeq, NewSeq: it.NewSeq}
	case kvstream.Reconnected:
		in = ingest.Reconnected{}
	default:
		return
	}
	if err := c.ing.Step(dp, in); err != nil {
		c.log.Error("agent: item for a DP rank the worker does not serve", "dp_rank", dp, "err", err)
	}
}

// SetEngineUp reports the engine's health as judged by the liveness probe.
func (c *Core) SetEngineUp(up bool) {
	for _, dp := range c.dps {
		_ = c.ing.Step(dp, ingest.Engine{Up: up}) // dps are the core's ranks
	}
}

// SetRunner reports what the runner prober found at one of DP rank dp's
// runners.
func (c *Core) SetRunner(dp int, r ingest.Runner) {
	if err := c.ing.Step(dp, r); err != nil {
		c.log.Error("agent: runner report for a DP rank the worker does not serve", "dp_rank", dp, "err", err)
	}
}

// Snapshot hands DP rank dp's engine snapshot (snapshot-v1) to the core,
// before the rank's first stream item.
func (c *Core) Snapshot(dp int, s *kvstream.Snapshot) {
	in := ingest.Snapshot{Epoch: kvstream.EpochSuffix(s.Header.Epoch), ResumeSeq: s.Header.ResumeSeq, Blocks: s.Blocks}
	if err := c.ing.Step(dp, in); err != nil {
		c.log.Error("agent: snapshot of a DP rank the worker does not serve", "dp_rank", dp, "err", err)
	}
}

// Stop announces, once the engine streams are no longer read, which
// sources are gone: every worker rank (its blocks live in the engine,
// which nobody relays anymore) and every cache owner that is not ready.
// A ready owner is left as it is: its runner still serves what it holds,
// and a router keeps it as a detached source for its detached-owner TTL
// once the worker's registration goes (docs/wire.md §9.6). Either way a
// router ends in the same state whichever of these messages and the
// deregistration it reads first.
func (c *Core) Stop() {
	ready := c.loc.readiness()
	for _, s := range c.loc.sources {
		if s.IsOwner() && ready[s] {
			continue
		}
		c.commit(s, relay.KindGone, nil, func() error {
			c.loc.set(s, false, false)
			c.loc.mu.Lock()
			c.loc.gone[s] = true
			c.loc.mu.Unlock()
			return nil
		})
	}
}

// Apply changes the local index, through the plane while consumers mirror
// the source.
func (o *output) Apply(s index.Source, ops []index.Op) error {
	c := (*Core)(o)
	change := func() error { return c.loc.ix.Apply(s, ops...) }
	if !c.loc.isAttached(s) {
		return change()
	}
	return c.commit(s, relay.KindOps, ops, change)
}

// Reset empties s. A source that holds nothing is left alone: consumers
// already mirror its empty state. An attached source stays ready: consumers
// drop it and hold it ready again.
func (o *output) Reset(s index.Source) {
	c := (*Core)(o)
	if !slices.Contains(c.loc.ix.Sources(), s) {
		return
	}
	if !c.loc.isAttached(s) {
		c.loc.ix.RemoveSource(s)
		return
	}
	c.commit(s, relay.KindReset, nil, func() error {
		c.loc.ix.RemoveSource(s)
		c.loc.set(s, false, false)
		return nil
	})
	c.attach(s)
}

// Ready attaches s (consumers mirror it from now on) or detaches it
// (consumers drop it and hold it not ready; the local state is kept).
func (o *output) Ready(s index.Source, ready bool) {
	c := (*Core)(o)
	switch attached := c.loc.isAttached(s); {
	case ready && !attached:
		c.attach(s)
	case !ready && attached:
		c.commit(s, relay.KindReset, nil, func() error { c.loc.set(s, false, false); return nil })
	}
}

// Count counts r.
func (o *output) Count(r ingest.Reason) { o.cnt.reasons[r].Add(1) }

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

// Ident implements ingest.Identifier on the agent's local index.
func (o *output) Ident(s index.Source, e uint64) (uint64, uint32, bool) {
	return (*Core)(o).loc.ix.Ident(s, e)
}
