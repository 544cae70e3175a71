// This file holds the core: its configuration, its output, and the ordering state of each DP rank's stream.

package ingest

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"kvrouter/internal/index"
)

// ErrUnknownRank marks an input for a DP rank the core was not configured
// with.
var ErrUnknownRank = errors.New("ingest: DP rank not served")

// Output receives the core's decisions, on the goroutine that drives the
// core. Every source starts empty and not ready at the output.
type Output interface {
	// Apply changes src by ops, in order, as index.Index.Apply does: it may
	// refuse an op with an *index.OpError naming its position, having
	// applied the ops before it and none after. The core only ever puts a
	// store under a parent first in ops, the one op an index refuses for
	// what it holds, so a refusal at position 0 changed nothing.
	Apply(src index.Source, ops []index.Op) error
	// Reset empties src; its readiness stays as it was (the core tells
	// Ready first when it goes).
	Reset(src index.Source)
	// Ready says whether src may be named by hints. While it is not, the
	// core keeps applying ops to it: the output decides whether consumers
	// see them.
	Ready(src index.Source, ready bool)
	// Count records one rejected batch, dropped event or op, or reset rank.
	Count(r Reason)
}

// Identifier is an Output that can say the identity and depth of a block a
// source holds (index.Index.Ident). With it, a runner's store under a
// parent only the rank's GPU holds is applied by identities rather than
// dropped.
type Identifier interface {
	Ident(src index.Source, engine uint64) (seq uint64, depth uint32, ok bool)
}

// Rank names the sources one DP rank's stream feeds.
type Rank struct {
	DP     int
	Worker index.Source // framework-owned blocks: index.WorkerRank
	// Owner takes runner-owned blocks (index.CacheOwner) when HasOwner; a
	// rank without one counts them dropped (DropNoOwner).
	Owner    index.Source
	HasOwner bool
}

// Config is what the core is told about the worker whose streams it reads.
type Config struct {
	Ranks     []Rank
	BlockSize int // the worker's KV block size: a store of another is rejected
	// TP is the number of TP ranks whose runners report their shards of a
	// DP rank's runner inventory apart (kvevents.RunnerShardTopic). Above 1
	// the shards are folded: the owner holds a block only while every
	// shard does. At most 1, a shard topic is rejected.
	TP int
	// InheritSalt carries a salted root's salt to the stores under it
	// (vLLM names it in a prefix's first block only; SGLang in every one).
	InheritSalt bool
	// Lossy says the output may drop blocks on its own (a capped index
	// evicts): a store under an unknown parent then proves no lost batch.
	Lossy bool
	// ProbeRunners says a runner prober reports each owning rank's runners
	// (Runner inputs, one per TP rank). A cache owner then outlives its
	// engine: a reconnect, a restart, a new epoch or the engine down reset
	// the worker source only and suspend the owner, which is ready again
	// once the prober finds every runner up with the epoch it had; a new
	// epoch (the runner restarted) or an expired runner resets it. Without
	// it nobody can tell that a runner outlived its engine, and those
	// signals reset the owner with the worker.
	ProbeRunners bool
	// Runners is how many runners (TP ranks) each owning rank has, all of
	// which must answer the prober; 0 means max(TP, 1). An engine that
	// folds its TP shards itself still has a runner per TP rank.
	Runners int
	Log     *slog.Logger // nil: slog.Default
}

// Core turns each DP rank's engine stream into ordered inventory ops of
// the rank's sources. It owns no sockets, clocks or goroutines; one
// goroutine drives it (Step), and it calls its Output on that goroutine.
type Core struct {
	cfg   Config
	out   Output
	log   *slog.Logger
	ranks map[int]*rank
	// sharded: a runner shard topic arrived while the core folds no
	// shards (TP <= 1), so the engine shards: a replayed runner store,
	// which names no shard, may be one shard's.
	sharded bool
	warned  [NumReasons]bool // rejections logged at warn level once per reason
	steps   []step           // scratch of plan
}

// rank is one DP rank's stream and the sources it feeds.
type rank struct {
	Rank
	agg *aggregator // non-nil: runner inventory arrives per TP shard
	// gone: identities of blocks the rank's sources dropped lately (with
	// an owner only), for runner stores under them.
	gone goneBlocks
	// pending: runner stores waiting for their parent (with an owner only).
	pending pendingStores
	srcs    []index.Source // the worker's, then the owner's
	ready   []bool         // as last told to the output, by srcs index

	// The stream is in order while a batch arrived since the start (or a
	// reconnect, or the engine's return), no gap is open and the engine is
	// up.
	waiting bool
	open    []gapSpan
	down    bool

	// With Config.ProbeRunners, the owner stands on its runners: ready
	// while each has answered the prober, with the epoch first seen,
	// since the last engine-level signal.
	runners []runnerState // by TP rank
	// suspended holds the owner's steps applied since the last
	// engine-level signal suspended it, until every runner answered again
	// (see suspension).
	suspended *suspension

	// cut is a pending engine snapshot, applied once the stream reaches
	// its resume seq; resumed is that seq while a batch below it can
	// still arrive (a duplicate of what the cut holds).
	cut     *cut
	resumed uint64
	// cuttable: no batch since the start, a Restart or a Reconnected, so
	// the engine process's snapshot may be placed.
	cuttable bool

	seen  bool   // a batch arrived since the start
	epoch string // SGLang publisher epoch of the last live batch
	// complete: since the worker source was last emptied, every batch its
	// publisher process sent has been applied (the first seq seen was 0
	// and nothing was lost or skipped). Only then does an unknown parent
	// prove a gap the seq did not reveal.
	complete bool
	groups   groupKinds // a hybrid model's KV groups, from stores
	salts    saltChains // with InheritSalt: blocks under salted roots
}

type gapSpan struct{ from, to uint64 }

// runnerState is what the prober last found at one runner.
type runnerState struct {
	known bool // answered once: epoch is its start epoch
	up    bool // answered last, and since the last engine-level signal
	epoch uint64
}

// inOrder reports whether the worker source may be ready: its stream is
// in order and its engine up.
func (r *rank) inOrder() bool { return !r.waiting && len(r.open) == 0 && !r.down && r.cut == nil }

// ownerInOrder reports whether the owner may be ready. Without probed
// runners it stands with the worker. With them, the stream must have
// delivered and have no open gap (its runner's events travel on it), and
// every runner must have answered since the last engine-level signal.
func (r *rank) ownerInOrder(probe bool) bool {
	if !probe {
		return r.inOrder()
	}
	if !r.seen || len(r.open) > 0 || r.cut != nil {
		return false
	}
	for _, rs := range r.runners {
		if !rs.up {
			return false
		}
	}
	return true
}

// New returns the core of cfg's ranks, deciding into out. Every source
// starts not ready; a rank's become ready once its stream delivers a batch.
func New(cfg Config, out Output) (*Core, error) {
	if cfg.BlockSize <= 0 {
		return nil, fmt.Errorf("ingest: Config.BlockSize %d: must be positive", cfg.BlockSize)
	}
	if len(cfg.Ranks) == 0 {
		return nil, errors.New("ingest: Config.Ranks: no DP rank")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	c := &Core{cfg: cfg, out: out, log: cfg.Log, ranks: map[int]*rank{}}
	for _, rk := range cfg.Ranks {
		if c.ranks[rk.DP] != nil {
			return nil, fmt.Errorf("ingest: Config.Ranks: DP rank %d given twice", rk.DP)
		}
		r := &rank{Rank: rk, waiting: true, cuttable: true, srcs: []index.Source{rk.Worker}}
		if rk.HasOwner {
			r.srcs = append(r.srcs, rk.Owner)
			if cfg.TP > 1 {
				r.agg = newAggregator(cfg.TP)
			}
			if cfg.ProbeRunners {
				n := cfg.Runners
				if n <= 0 {
					n = max(cfg.TP, 1)
				}
				r.runners = make([]runnerState, n)
			}
		}
		r.ready = make([]bool, len(r.srcs))
		c.ranks[rk.DP] = r
	}
	return c, nil
}

// Step feeds one input of DP rank dp's stream.
func (c *Core) Step(dp int, in Input) error {
	r := c.ranks[dp]
	if r == nil {
		return fmt.Errorf("%w: %d", ErrUnknownRank, dp)
	}
	switch in := in.(type) {
	case Batch:
		c.batch(r, in)
	case Gap:
		if !in.Healed {
			r.open = append(r.open, gapSpan{in.From, in.To})
			c.log.Info("ingest: event gap, sources not ready until replay resolves it", "dp_rank", dp, "from", in.From, "to", in.To)
		} else {
			r.open = removeSpans(r.open, func(g gapSpan) bool { return g.from == in.From && g.to == in.To })
		}
		c.sync(r)
	case Unrecoverable:
		// A lost span resolves every open gap it overlaps: those gaps will
		// never be reported healed.
		r.open = removeSpans(r.open, func(g gapSpan) bool { return g.from <= in.To && g.to >= in.From })
		c.log.Warn("ingest: events lost for good, rebuilding the rank's inventory", "dp_rank", dp, "from", in.From, "to", in.To)
		c.reset(r, ResetUnrecoverable)
		c.sync(r)
	case Restart:
		c.log.Info("ingest: engine publisher restarted, rebuilding the rank's inventory", "dp_rank", dp, "old_seq", in.OldSeq, "new_seq", in.NewSeq)
		r.open = nil
		c.engineReset(r, ResetRestart)
		// A new process starts with an empty cache: from its seq 0 on we
		// see its whole history.
		r.complete = in.NewSeq == 0
		// The new process's batches carry its own SGLang epoch: that is
		// the restart just handled, not another one.
		r.epoch = ""
		r.cuttable = true
		c.sync(r)
	case Reconnected:
		// A seq that moves forward after a reconnect does not prove the
		// same publisher process: a restarted engine that sent more batches
		// than we last saw would pass for a gap, and its replay would be
		// applied on the old process's blocks. Start over.
		c.log.Info("ingest: event stream reconnected, rebuilding the rank's inventory", "dp_rank", dp)
		r.waiting = true
		c.engineReset(r, ResetReconnected)
		r.epoch = "" // whatever epoch comes next is the one we start over from
		r.cuttable = true
		c.sync(r)
	case Engine:
		// A down engine's stream may have stopped without a sign: its worker
		// source is reset and stays not ready until the engine is back and
		// its stream delivers a batch. Its runners stand or fall by the
		// prober (engineReset).
		if in.Up == !r.down {
			return nil
		}
		if in.Up {
			r.down, r.waiting = false, true
		} else {
			r.down = true
			c.engineReset(r, ResetEngineDown)
		}
		c.sync(r)
	case Snapshot:
		c.snapshot(r, in)
	case Runner:
		c.runner(r, in)
	}
	return nil
}

// engineReset handles a signal that the engine's process or stream is not
// the one whose inventory the rank holds. The worker source is rebuilt.
// The owner's inventory is its runners': with probed runners it is kept
// but suspended until the prober vouches for them again; otherwise it is
// rebuilt too.
func (c *Core) engineReset(r *rank, reason Reason) {
	if !r.HasOwner || !c.cfg.ProbeRunners {
		c.reset(r, reason)
		return
	}
	for i := range r.runners {
		// The owner is suspended until each runner answers again.
		r.runners[i].up = false
	}
	c.resetSome(r, reason, true, false)
	if r.suspended == nil {
		r.suspended = &suspension{}
	}
}

// runner takes a prober report of one of the rank's runners.
func (c *Core) runner(r *rank, in Runner) {
	if !r.HasOwner || !c.cfg.ProbeRunners || in.TP < 0 || in.TP >= len(r.runners) {
		return
	}
	rs := &r.runners[in.TP]
	switch in.State {
	case RunnerUp:
		if rs.known && rs.epoch != in.Epoch {
			// A new runner process holds none of what its owner had.
			c.log.Info("ingest: runner restarted, rebuilding its cache owner's inventory", "dp_rank", r.DP, "tp_rank", in.TP)
			c.resetSome(r, ResetRunnerRestart, false, true)
			c.resume(r)
		}
		*rs = runnerState{known: true, up: true, epoch: in.Epoch}
		if r.suspended != nil && !slices.ContainsFunc(r.runners, func(rs runnerState) bool { return !rs.up }) {
			r.suspended = nil // vouched for: what it applied stands
		}
	case RunnerDown:
		rs.up = false
	case RunnerExpired:
		if rs.up {
			return // answered since: a late report
		}
		c.log.Info("ingest: runner unreachable past the owner TTL, dropping its cache owner's inventory", "dp_rank", r.DP, "tp_rank", in.TP)
		c.resetSome(r, ResetRunnerExpired, false, true)
		r.suspended = nil
		// Whatever answers next starts a new life of the owner.
		rs.known = false
	}
	c.sync(r)
}

// want reports whether r's source i (0 the worker, 1 the owner) may be
// ready.
func (c *Core) want(r *rank, i int) bool {
	if i == 0 {
		return r.inOrder()
	}
	return r.ownerInOrder(c.cfg.ProbeRunners)
}

// sync tells the output the readiness of r's sources where it changed.
func (c *Core) sync(r *rank) {
	for i, s := range r.srcs {
		if want := c.want(r, i); r.ready[i] != want {
			r.ready[i] = want
			c.out.Ready(s, want)
		}
	}
}

// reset empties the rank's sources and starts their rebuild.
func (c *Core) reset(r *rank, reason Reason) { c.resetSome(r, reason, true, true) }

// resetSome empties the rank's worker source, its owner, or both, and
// starts their rebuild. The caller has set the rank's order first: a
// source that is not to stay ready is told so before it is emptied, so a
// consumer never sees it ready and empty in between.
func (c *Core) resetSome(r *rank, reason Reason, worker, owner bool) {
	c.out.Count(reason)
	for i, s := range r.srcs {
		if (i == 0 && !worker) || (i == 1 && !owner) {
			continue
		}
		if r.ready[i] && !c.want(r, i) {
			r.ready[i] = false
			c.out.Ready(s, false)
		}
		c.out.Reset(s)
	}
	if worker {
		r.complete = false
		// A cut names what the engine held before: the rebuild starts
		// from what comes next.
		r.cut, r.resumed = nil, 0
	}
	switch {
	case worker && (owner || !r.HasOwner):
		r.salts = nil
	case worker:
		r.salts.Drop(false)
	case owner:
		r.salts.Drop(true)
	}
	if owner && r.agg != nil {
		r.agg.Reset()
	}
	c.dropPending(r)
}

func removeSpans(s []gapSpan, drop func(gapSpan) bool) []gapSpan {
	s = slices.DeleteFunc(s, drop)
	if len(s) == 0 {
		return nil
	}
	return s
}
