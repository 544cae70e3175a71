// This file holds how the core takes a batch: converted whole, then applied in groups, all or none.

package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"kvrouter/internal/index"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvhash"
)

// specFullAttention is vLLM's kv_cache_spec_kind of the full-attention KV
// group, the one routing follows: hybrid models emit one stream per KV
// group and only this one keys the prefix by tokens alone.
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

func (c *Core) batch(r *rank, b Batch) {
	if r.cut == nil && r.resumed > 0 {
		if b.Seq < r.resumed {
			// The engine's snapshot already holds what this batch did.
			c.out.Count(DropDuplicate)
			return
		}
		r.resumed = 0
	}
	if r.cut != nil && b.Seq >= r.cut.resume {
		// The history ended short of the barrier: what the stream brings
		// from here is after the cut.
		c.endCut(r)
	}
	if !r.seen {
		r.seen = true
		r.complete = b.Seq == 0
	}
	r.cuttable = false
	_, tp, shard := kvevents.ParseRunnerShardTopic(b.Topic)
	// A replayed batch's topic is another batch's: its epoch says nothing.
	if !b.Replayed && b.Epoch != r.epoch {
		if r.epoch != "" {
			c.log.Info("ingest: engine publisher epoch changed, rebuilding the rank's inventory", "dp_rank", r.DP)
			c.engineReset(r, ResetEpoch)
		}
		r.epoch = b.Epoch
	}
	r.waiting = false
	c.sync(r)
	defer func() {
		if r.cut != nil && b.Seq+1 == r.cut.resume {
			c.endCut(r) // the barrier: the history is whole
		}
	}()

	if b.Err != nil {
		c.reject(r, RejectMalformed, b, b.Err)
		return
	}
	if b.Replayed {
		// Replay frames carry no topic: the one stamped on a replayed batch
		// is that of the live message that opened its gap. A shard topic
		// there says the engine shards, not which shard this batch is.
		if shard {
			c.sharded = true
		}
		tp, shard = 0, false
	}
	steps, reason, err := c.plan(r, b.Events, tp, shard, b.Replayed)
	if err != nil {
		c.reject(r, reason, b, err)
		return
	}
	c.apply(r, steps)
}

// reject counts a batch refused whole and resets its rank: it may have
// carried removals.
func (c *Core) reject(r *rank, reason Reason, b Batch, err error) {
	c.out.Count(reason)
	level := slog.LevelDebug
	if !c.warned[reason] {
		c.warned[reason] = true
		level = slog.LevelWarn
	}
	c.log.Log(context.Background(), level, "ingest: engine batch rejected whole; its rank is rebuilt (later ones of this reason are logged at debug level)",
		"dp_rank", r.DP, "seq", b.Seq, "topic", b.Topic, "reason", reason.String(), "err", err)
	c.reset(r, ResetRejected)
	c.sync(r)
}

// plan converts a whole batch before anything is applied, so that a batch
// is rejected whole or applied whole: the reason and error say why.
func (c *Core) plan(r *rank, evs []kvevents.Event, tp int, shard, replayed bool) ([]step, Reason, error) {
	if shard && r.HasOwner && (r.agg == nil || tp >= r.agg.Ranks()) {
		// One shard's runner inventory is not the rank's: applied to the
		// owner it would offer blocks other shards lack.
		c.sharded = true
		return nil, RejectTopic, fmt.Errorf("runner shard topic names TP rank %d; the worker folds %d TP ranks per DP rank", tp, max(c.cfg.TP, 1))
	}
	steps := c.steps[:0]
	for i := range evs {
		ev := &evs[i]
		if ev.GroupIdx != 0 || (ev.SpecKind != "" && ev.SpecKind != specFullAttention) {
			// A hybrid model: removals do not say their group's kind, so
			// another group's removal may take a full-attention block from
			// us, and a later store under it would look like a gap.
			r.complete = false
		}
		// Groups share block hashes: another group's removal must not take
		// the full-attention group's block.
		if kind := r.groups.Of(ev); kind != "" && kind != specFullAttention {
			c.out.Count(DropOtherGroup)
			continue
		}
		if c.cfg.InheritSalt {
			// Before the split by owner: a block the runner holds is still
			// the parent of the engine's stores under it.
			r.salts.Inherit(ev)
		}
		st := step{to: toWorker, src: r.Worker}
		allShards := false
		if shard || ev.Ownership == kvevents.OwnedByRunner {
			switch {
			case !r.HasOwner:
				c.out.Count(DropNoOwner)
				continue
			case r.agg != nil && shard:
				st = step{to: toShard, tp: tp}
			case (r.agg != nil || (replayed && c.sharded)) && ev.Kind == kvevents.KindStored:
				// Runner inventory without its TP shard: a replayed batch
				// (replay frames carry no topic) or a plain topic. Leaving
				// out one shard's store only under-reports the owner.
				c.out.Count(DropUnattributed)
				continue
			case r.agg != nil:
				// A removal or clear of an unknown shard withdraws the
				// blocks from every shard: under-reporting is safe,
				// keeping a block a shard dropped is not.
				st, allShards = step{to: toShard}, true
			default:
				st = step{to: toOwner, src: r.Owner}
			}
		}
		if ev.Kind == kvevents.KindStored && !ev.Placeholder && ev.BlockSize != c.cfg.BlockSize {
			return nil, RejectBlockSize, fmt.Errorf("event %d: %w: event block_size %d, worker %d", i, index.ErrBlockSize, ev.BlockSize, c.cfg.BlockSize)
		}
		op, err := index.OpFromEvent(*ev)
		if errors.Is(err, index.ErrPlaceholder) {
			c.out.Count(DropPlaceholder)
			if st.to == toWorker {
				// Its descendants will name a parent we could not index.
				r.complete = false
			}
			continue
		}
		if err != nil {
			return nil, RejectEvent, fmt.Errorf("event %d: %w", i, err)
		}
		st.op = op
		if !allShards {
			steps = append(steps, st)
			continue
		}
		for t := range r.agg.Ranks() {
			st.tp = t
			steps = append(steps, st)
		}
	}
	c.steps = steps[:0]
	return steps, 0, nil
}

// apply applies a planned batch in order, one group of ops per output
// call. A store under a parent is the only op the output may refuse, and
// it refuses it whole; so a group starts at such a store or holds none, and
// a refused group has changed nothing: no half-applied group is ever seen.
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
	if r.suspended != nil {
		r.suspended.record(steps)
	}
	for _, st := range steps {
		if st.to != toShard && st.op.Kind == index.OpRemove && r.HasOwner {
			c.rememberGone(r, st.src, st.op.Hashes)
			if st.src == r.Owner {
				c.cancelPending(r, st.op.Hashes)
			}
		}
		if st.to != toShard {
			add(st.src, st.op)
			continue
		}
		out, err := r.agg.Apply(st.tp, st.op)
		if err != nil {
			// Owner sources are never complete (runner blocks can outlive
			// their publisher), so an unknown parent is only skipped.
			c.out.Count(dropReason(err))
			continue
		}
		for _, op := range out {
			add(r.Owner, op)
		}
	}
	flush()
}

// applyRun applies ops of one source, skipping a refused leading store.
func (c *Core) applyRun(r *rank, s index.Source, ops []index.Op) {
	for len(ops) > 0 {
		err := c.out.Apply(s, ops)
		if err == nil {
			c.release(r, ops)
			return
		}
		var oe *index.OpError
		if !errors.As(err, &oe) || oe.Pos != 0 {
			c.log.Error("ingest: the output refused an op after accepting part of its group; rebuilding the rank", "dp_rank", r.DP, "source", s, "err", err)
			c.reset(r, ResetInconsistent)
			c.sync(r)
			return
		}
		if errors.Is(err, index.ErrUnknownParent) && s == r.Owner && r.HasOwner {
			if c.underSibling(r, s, ops[0]) {
				c.release(r, ops[:1])
			} else {
				c.defer_(r, ops[0])
			}
			ops = ops[1:]
			continue
		}
		if errors.Is(err, index.ErrUnknownParent) && s == r.Worker && r.complete && !c.cfg.Lossy {
			// We applied every batch since this publisher started, so the
			// parent must be known: a batch went missing without the seq
			// showing it.
			c.log.Warn("ingest: store under an unknown parent on a complete stream; rebuilding the rank", "dp_rank", r.DP, "err", err)
			c.reset(r, ResetSilentGap)
			c.sync(r)
		}
		c.out.Count(dropReason(err))
		ops = ops[1:]
	}
}

// underSibling applies op, a store of the rank's runner under a parent the
// runner does not hold (it evicted it while the GPU kept it), by the
// identities of its blocks, when the rank's worker source holds the
// parent: the runner holds the blocks all the same, and a block of its
// held under a missing parent is what the index keeps when a parent is
// evicted after its child anyway. It reports whether op was applied.
func (c *Core) underSibling(r *rank, s index.Source, op index.Op) bool {
	id, ok := c.out.(Identifier)
	if !ok || op.Kind != index.OpStore || !op.HasParent || op.Local == nil {
		return false
	}
	pseq, depth, ok := id.Ident(r.Worker, op.Parent)
	if !ok {
		// The GPU (or the runner) may have dropped the parent since: a
		// peer pull lands after the local prefix it extends was evicted.
		var g goneBlock
		if g, ok = r.gone.get(op.Parent); !ok {
			return false
		}
		pseq, depth = g.seq, g.depth
	}
	st := op
	st.Parent, st.HasParent, st.Local = 0, false, nil
	st.Seqs, st.Depths = make([]uint64, len(op.Hashes)), make([]uint32, len(op.Hashes))
	prev := pseq
	for i := range op.Hashes {
		prev = kvhash.SequenceHash(prev, op.Local[i])
		st.Seqs[i], st.Depths[i] = prev, depth+1+uint32(i)
	}
	return c.out.Apply(s, []index.Op{st}) == nil
}

// maxPending bounds the runner stores a rank holds back until their
// parent is known; past it they are all dropped (and counted).
const maxPending = 1024

// pendingStores are runner stores held back because neither of the rank's
// sources knew their parent when they arrived: the engine's runner and GPU
// publish on their own, so a runner's block can come before the GPU's
// store of its parent in the same step, or before a pull of the parent
// that is still running commits. Each waits, by parent, for a store of it.
type pendingStores struct {
	byParent map[uint64][]index.Op
	byHash   map[uint64]uint64 // a held-back block's parent
}

func (p *pendingStores) len() int { return len(p.byHash) }

// defer_ holds op back until its parent is stored.
func (c *Core) defer_(r *rank, op index.Op) {
	p := &r.pending
	if p.len()+len(op.Hashes) > maxPending {
		c.dropPending(r)
	}
	if p.byParent == nil {
		p.byParent, p.byHash = map[uint64][]index.Op{}, map[uint64]uint64{}
	}
	// The op aliases the decoded batch, which is not ours to keep.
	op.Hashes, op.Local = slices.Clone(op.Hashes), slices.Clone(op.Local)
	p.byParent[op.Parent] = append(p.byParent[op.Parent], op)
	for _, h := range op.Hashes {
		p.byHash[h] = op.Parent
	}
}

// release applies the stores held back under the blocks ops stored.
func (c *Core) release(r *rank, ops []index.Op) {
	p := &r.pending
	if p.len() == 0 {
		return
	}
	for _, op := range ops {
		if op.Kind != index.OpStore {
			continue
		}
		for _, h := range op.Hashes {
			waiting := p.byParent[h]
			if len(waiting) == 0 {
				continue
			}
			delete(p.byParent, h)
			for _, w := range waiting {
				for _, k := range w.Hashes {
					delete(p.byHash, k)
				}
			}
			c.applyRun(r, r.Owner, waiting)
		}
	}
}

// cancelPending forgets held-back blocks the runner dropped: a store cut
// at the first of them keeps the blocks before it.
func (c *Core) cancelPending(r *rank, removed []uint64) {
	p := &r.pending
	if p.len() == 0 {
		return
	}
	for _, h := range removed {
		parent, ok := p.byHash[h]
		if !ok {
			continue
		}
		ops := p.byParent[parent]
		for i := range ops {
			j := slices.Index(ops[i].Hashes, h)
			if j < 0 {
				continue
			}
			for _, k := range ops[i].Hashes[j:] {
				delete(p.byHash, k)
			}
			c.out.Count(DropUnknownParent) // the blocks after it stay unknown
			ops[i].Hashes, ops[i].Local = ops[i].Hashes[:j], ops[i].Local[:j]
		}
		ops = slices.DeleteFunc(ops, func(op index.Op) bool { return len(op.Hashes) == 0 })
		if len(ops) == 0 {
			delete(p.byParent, parent)
		} else {
			p.byParent[parent] = ops
		}
	}
}

// dropPending gives up every held-back store.
func (c *Core) dropPending(r *rank) {
	for _, ops := range r.pending.byParent {
		for range ops {
			c.out.Count(DropUnknownParent)
		}
	}
	r.pending = pendingStores{}
}

// maxGone bounds the identities of blocks a rank's GPU dropped that the
// core remembers, per rank.
const maxGone = 4096

// goneBlock is a block's identity and depth, kept after the GPU dropped it.
type goneBlock struct {
	seq   uint64
	depth uint32
}

// goneBlocks remembers the identities of the last blocks a rank's worker
// source dropped, by engine hash, oldest forgotten first.
type goneBlocks struct {
	m     map[uint64]goneBlock
	order []uint64 // ring of keys, next at pos
	pos   int
}

func (g *goneBlocks) get(e uint64) (goneBlock, bool) {
	b, ok := g.m[e]
	return b, ok
}

func (g *goneBlocks) put(e uint64, b goneBlock) {
	if g.m == nil {
		g.m = make(map[uint64]goneBlock, maxGone)
		g.order = make([]uint64, 0, maxGone)
	}
	if _, ok := g.m[e]; ok {
		g.m[e] = b
		return
	}
	if len(g.order) < maxGone {
		g.order = append(g.order, e)
	} else {
		delete(g.m, g.order[g.pos])
		g.order[g.pos] = e
		g.pos = (g.pos + 1) % maxGone
	}
	g.m[e] = b
}

// rememberGone records the identities of blocks src, one of the rank's
// sources, is about to drop, so that a runner store naming one of them as
// its parent can still be placed (underSibling).
func (c *Core) rememberGone(r *rank, src index.Source, hashes []uint64) {
	id, ok := c.out.(Identifier)
	if !ok {
		return
	}
	for _, e := range hashes {
		if seq, depth, ok := id.Ident(src, e); ok {
			r.gone.put(e, goneBlock{seq, depth})
		}
	}
}

func dropReason(err error) Reason {
	if errors.Is(err, index.ErrUnknownParent) {
		return DropUnknownParent
	}
	return DropInvalid
}
