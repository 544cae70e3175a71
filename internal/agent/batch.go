package agent

import (
	"errors"
	"fmt"

	"kvrouter/internal/index"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/relay"
	"kvrouter/internal/workerconfig"
)

// specFullAttention is vLLM's kv_cache_spec_kind of the full-attention KV
// group, the one routing follows (SPEC 2.3).
const specFullAttention = "full_attention"

// step is one converted event and where it goes.
type step struct {
	to  target
	tp  int // TP shard, for toShard
	op  index.Op
	src index.Source // toWorker, toOwner
}

type target uint8

const (
	toWorker target = iota // framework-owned: the worker rank
	toOwner                // runner-owned: the cache owner directly
	toShard                // one TP rank's runner: through the aggregator
)

type plan struct {
	steps []step
}

// plan converts a whole batch before anything is applied, so that a batch
// is rejected whole or applied whole: the reason and error say why.
func (c *Core) plan(r *rank, b kvevents.Batch, tp int, shard bool) (plan, string, error) {
	var p plan
	if shard {
		switch {
		case !r.hasOwner:
		case r.agg != nil && tp < r.agg.Ranks():
		case r.agg == nil && tp == 0:
		default:
			return p, RejectTopic, fmt.Errorf("runner shard topic names TP rank %d, the worker has %d per DP rank", tp, c.desc.TPRanksPerDPRank)
		}
	}
	for i := range b.Events {
		ev := &b.Events[i]
		if ev.GroupIdx != 0 || (ev.SpecKind != "" && ev.SpecKind != specFullAttention) {
			// A hybrid model: removals do not say their group's kind, so
			// another group's removal may take a full-attention block from
			// us, and a later store under it would look like a gap.
			r.complete = false
		}
		// Groups share block hashes: another group's removal must not take
		// the full-attention group's block.
		kind := r.groups.Of(ev)
		if kind != "" && kind != specFullAttention {
			c.cnt.drop(DropOtherGroup)
			continue
		}
		st := step{to: toWorker, src: r.worker}
		allShards := false
		if shard || ev.Ownership == kvevents.OwnedByRunner {
			switch {
			case !r.hasOwner:
				c.cnt.drop(DropNoOwner)
				continue
			case r.agg != nil && shard:
				st = step{to: toShard, tp: tp}
			case r.agg != nil && ev.Kind == kvevents.KindStored:
				// Runner inventory without its TP shard: a replayed batch
				// (replay frames carry no topic) or a plain topic. Leaving
				// out one shard's store only under-reports the aggregate.
				c.cnt.drop(DropUnattributed)
				continue
			case r.agg != nil:
				// A removal or clear of an unknown shard withdraws the
				// blocks from every shard: under-reporting is safe,
				// keeping a block a shard dropped is not.
				st, allShards = step{to: toShard}, true
			default:
				st = step{to: toOwner, src: r.owner}
			}
		}
		if err := c.desc.CheckEventBlockSize(ev); err != nil {
			return p, RejectBlockSize, fmt.Errorf("event %d: %w", i, err)
		}
		if c.desc.Engine == workerconfig.EngineVLLM {
			r.salts.Inherit(ev)
		}
		op, err := index.OpFromEvent(*ev)
		if errors.Is(err, index.ErrPlaceholder) {
			c.cnt.drop(DropPlaceholder)
			if st.to == toWorker {
				// Its descendants will name a parent we could not index.
				r.complete = false
			}
			continue
		}
		if err != nil {
			return p, RejectEvent, fmt.Errorf("event %d: %w", i, err)
		}
		st.op = op
		if !allShards {
			p.steps = append(p.steps, st)
			continue
		}
		for t := range r.agg.Ranks() {
			st.tp = t
			p.steps = append(p.steps, st)
		}
	}
	return p, "", nil
}

// apply applies a planned batch in order, one group of ops per commit. A
// store under a parent is the only op the index may refuse, and it refuses
// it whole; so a group starts at such a store or holds none, and a refused
// group has changed nothing: no half-applied group is ever published.
func (c *Core) apply(r *rank, steps []step) {
	var run []index.Op
	var runSrc index.Source
	flush := func() {
		if len(run) > 0 {
			c.applyRun(r, runSrc, run)
		}
		run = nil
	}
	add := func(s index.Source, op index.Op) {
		if (len(run) > 0 && runSrc != s) || (op.Kind == index.OpStore && op.HasParent) {
			flush()
		}
		runSrc = s
		run = append(run, op)
	}
	for _, st := range steps {
		if st.to != toShard {
			add(st.src, st.op)
			continue
		}
		out, err := r.agg.Apply(st.tp, st.op)
		if err != nil {
			// Owner sources are never complete (runner blocks can outlive
			// their publisher), so an unknown parent is only skipped.
			c.cnt.drop(dropReason(err))
			continue
		}
		for _, op := range out {
			add(r.owner, op)
		}
	}
	flush()
}

// applyRun applies ops of one source, skipping a refused leading store.
func (c *Core) applyRun(r *rank, s index.Source, ops []index.Op) {
	for len(ops) > 0 {
		err := c.applyOps(s, ops)
		if err == nil {
			return
		}
		var oe *index.OpError
		if !errors.As(err, &oe) || oe.Pos != 0 {
			c.log.Error("agent: local index refused an op after accepting part of its group; rebuilding the rank", "dp_rank", r.dp, "source", s, "err", err)
			c.reset(r, ResetInconsistent)
			c.sync(r)
			return
		}
		if errors.Is(err, index.ErrUnknownParent) && s == r.worker && r.complete {
			// We applied every batch since this publisher started, so the
			// parent must be known: a batch went missing without the seq
			// showing it.
			c.log.Warn("agent: store under an unknown parent on a complete stream; rebuilding the rank", "dp_rank", r.dp, "err", err)
			c.reset(r, ResetSilentGap)
			c.sync(r)
		}
		c.cnt.drop(dropReason(err))
		ops = ops[1:]
	}
}

// applyOps changes the local index, through the plane while consumers
// mirror the source.
func (c *Core) applyOps(s index.Source, ops []index.Op) error {
	change := func() error { return c.loc.ix.Apply(s, ops...) }
	if !c.loc.isAttached(s) {
		return change()
	}
	return c.commit(s, relay.KindOps, ops, change)
}

func dropReason(err error) string {
	if errors.Is(err, index.ErrUnknownParent) {
		return DropUnknownParent
	}
	return DropInvalid
}
