// This file holds what a suspended cache owner keeps: its steps since an engine-level signal, for a runner restart found late.

package ingest

import (
	"slices"
)

// maxSuspended bounds the blocks a suspension records; past it the record
// is given up (a runner restart found then loses what the new runner
// stored meanwhile, until the engine reports it again).
const maxSuspended = 1 << 16

// suspension records the owner's steps applied while it was suspended.
//
// An engine-level signal (restart, reconnect, new epoch, engine down)
// suspends the owner until the prober finds every runner up again. When
// the engine and its runner restarted together, the new engine's stream
// usually arrives before the prober's next answer: its stores are the new
// runner's, applied on the old inventory. When the prober then reports the
// new epoch, the owner is emptied, and these stores are applied again:
// they are all the new runner holds.
type suspension struct {
	steps  []step
	blocks int
	lost   bool // past maxSuspended: the record is incomplete
}

// record keeps the steps of batch that reach the owner, copied (a batch's
// slices alias the decoded message).
func (s *suspension) record(batch []step) {
	if s.lost {
		return
	}
	for _, st := range batch {
		if st.to == toWorker {
			continue
		}
		s.blocks += max(len(st.op.Hashes), 1)
		if s.blocks > maxSuspended {
			s.steps, s.lost = nil, true
			return
		}
		op := st.op
		op.Hashes, op.Local = slices.Clone(op.Hashes), slices.Clone(op.Local)
		op.Seqs, op.Depths = slices.Clone(op.Seqs), slices.Clone(op.Depths)
		st.op = op
		s.steps = append(s.steps, st)
	}
}

// resume applies again, on the owner just emptied by a runner restart,
// what its stream brought since the suspension began.
func (c *Core) resume(r *rank) {
	s := r.suspended
	switch {
	case s == nil:
		return
	case s.lost:
		// Its steps were given up: the check must come before theirs.
		c.log.Info("ingest: too many runner stores since the engine-level signal to apply again; the owner rebuilds from what comes next",
			"dp_rank", r.DP, "max_blocks", maxSuspended)
		return
	case len(s.steps) == 0:
		return
	}
	steps := s.steps
	r.suspended = nil // apply records nothing of its own replay
	c.apply(r, steps)
	r.suspended = s
}
