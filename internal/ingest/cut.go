// This file holds the engine's snapshot (SGLang snapshot-v1) as the core applies it: a cut that the history before it fills in.

package ingest

// cut is an engine snapshot waiting for its rank's stream to reach its
// resume seq: it gives the rank its epoch and the seq from which live
// batches follow the history. It prunes nothing of the history (the
// engine's replay buffer): the engine's mirror is keyed by block hash
// whatever the medium, so a removal from one medium takes out a block
// another still holds, while the history, a contiguous run of the stream,
// carries every store's later removals itself.
type cut struct {
	resume uint64
	named  int // blocks the cut holds
}

// snapshot takes the engine's cut of a rank. It comes before the first
// batch of the rank's engine process: at start, or after a Restart or a
// Reconnected, which emptied the worker source (a driver fetches the new
// process's cut again, then replays its history from seq 0). One that
// comes later is ignored, since batches already applied may be before or
// after it.
func (c *Core) snapshot(r *rank, s Snapshot) {
	if !r.cuttable {
		c.log.Warn("ingest: engine snapshot after a batch of the engine process; ignored", "dp_rank", r.DP, "resume_seq", s.ResumeSeq)
		return
	}
	k := &cut{resume: s.ResumeSeq}
	for _, b := range s.Blocks {
		k.named += len(b.Hashes)
	}
	r.cut = k
	// The live batches after the cut carry the snapshot's epoch: it is
	// the publisher the cut is of, not a new one.
	r.epoch = s.Epoch
	c.sync(r)
}

// endCut closes the rank's history: from here on the stream is live, and a
// batch below the resume seq is a duplicate of what the cut holds.
func (c *Core) endCut(r *rank) {
	k := r.cut
	r.cut, r.resumed = nil, k.resume
	c.log.Info("ingest: engine snapshot applied; live from its resume seq", "dp_rank", r.DP, "resume_seq", k.resume,
		"blocks_held", k.named)
	c.sync(r)
}
