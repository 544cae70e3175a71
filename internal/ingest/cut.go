// This file holds the engine's snapshot (SGLang snapshot-v1) as the core applies it: a cut that the history before it fills in.

package ingest

import "kvrouter/internal/kvevents"

// cut is an engine snapshot waiting for its rank's stream to reach its
// resume seq. The snapshot names blocks by engine hash only; their
// identities come from their stores in the history before the cut (the
// engine's replay buffer), of which the cut keeps the blocks it holds.
// A block the history stores and the cut does not hold was removed by the
// cut; a block the cut holds whose store the history lacks cannot be named
// and is left out. Both only under-report.
type cut struct {
	resume uint64
	held   map[uint64]struct{}
	named  int // blocks the cut holds
	kept   int // history stores it kept
}

// snapshot takes the engine's cut of a rank. It comes before the rank's
// first batch; one that comes later is ignored, since batches already
// applied may be before or after it.
func (c *Core) snapshot(r *rank, s Snapshot) {
	if r.seen {
		c.log.Warn("ingest: engine snapshot after the rank's first batch; ignored", "dp_rank", r.DP, "resume_seq", s.ResumeSeq)
		return
	}
	k := &cut{resume: s.ResumeSeq, held: map[uint64]struct{}{}}
	for _, b := range s.Blocks {
		for _, h := range b.Hashes {
			k.held[h] = struct{}{}
		}
	}
	k.named = len(k.held)
	r.cut = k
	// The live batches after the cut carry the snapshot's epoch: it is
	// the publisher the cut is of, not a new one.
	r.epoch = s.Epoch
	c.sync(r)
}

// keep cuts a history store down to the run of its blocks the cut holds,
// and reports whether it kept all of them. A block cut off takes the rest
// of the run with it: their identities chain through it.
func (k *cut) keep(ev *kvevents.Event) bool {
	n := 0
	for n < len(ev.BlockHashes) {
		if _, ok := k.held[ev.BlockHashes[n]]; !ok {
			break
		}
		n++
	}
	k.kept += n
	if n == len(ev.BlockHashes) {
		return true
	}
	ev.BlockHashes = ev.BlockHashes[:n]
	if !ev.Placeholder {
		ev.TokenIDs = ev.TokenIDs[:n*ev.BlockSize]
	}
	return false
}

// endCut closes the rank's history: from here on the stream is live, and a
// batch below the resume seq is a duplicate of what the cut holds.
func (c *Core) endCut(r *rank) {
	k := r.cut
	r.cut, r.resumed = nil, k.resume
	c.log.Info("ingest: engine snapshot applied; live from its resume seq", "dp_rank", r.DP, "resume_seq", k.resume,
		"blocks_held", k.named, "stores_kept", k.kept)
	c.sync(r)
}
