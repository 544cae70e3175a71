// This file holds approximate mode: decisions committed as blocks that expire after a TTL.

package router

import (
	"time"

	"kvrouter/internal/index"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvhash"
)

// Approximate inventory: for a worker whose engine publishes no events the
// router assumes that the blocks of every request it sent there stay cached
// for ApproxTTL. The guess lives in the index like real inventory, so that
// matching and scoring need no second path, under the blocks' own sequence
// hashes as engine hashes; Meta never admits such a worker as a hint source
// or target.

// Commit records a decision that was acted on: for an approximate-mode
// target, its prompt's blocks are now assumed cached there until now+ApproxTTL.
// /debug/route decisions are not committed.
func (r *Router) Commit(d *Decision, now time.Time) {
	if d == nil || len(d.local) == 0 || r.cfg.ApproxTTL <= 0 {
		return
	}
	r.mu.RLock()
	e := r.workers[d.Target.Worker.ID]
	approx := e != nil && e.w.Mode == ModeApproximate && e.w.BlockSize == d.Target.Worker.BlockSize
	r.mu.RUnlock()
	if !approx {
		return
	}
	src := index.WorkerRank(d.Target.Worker.ID, d.Target.Rank)
	seqs := kvhash.SequenceHashes(d.local)
	op := index.Op{Kind: index.OpStore, Tier: kvevents.TierDevice, Hashes: seqs, Local: d.local}
	until := now.Add(r.cfg.ApproxTTL)

	r.amu.Lock()
	defer r.amu.Unlock()
	r.mu.RLock()
	// The worker may have left or switched to events since the check.
	e = r.workers[d.Target.Worker.ID]
	if e == nil || e.w.Mode != ModeApproximate {
		r.mu.RUnlock()
		return
	}
	err := r.set.Apply(src, op)
	r.mu.RUnlock()
	if err != nil {
		return
	}
	m := r.approx[src]
	if m == nil {
		m = make(map[uint64]time.Time, len(seqs))
		r.approx[src] = m
	}
	for _, s := range seqs {
		m[s] = until
	}
}

// expireApprox removes approximate blocks whose TTL has passed.
func (r *Router) expireApprox(now time.Time) {
	r.amu.Lock()
	defer r.amu.Unlock()
	var gone []uint64
	for src, m := range r.approx {
		gone = gone[:0]
		for s, until := range m {
			if !now.Before(until) {
				gone = append(gone, s)
				delete(m, s)
			}
		}
		r.mu.RLock()
		e := r.workers[src.Worker]
		if e == nil || e.w.Mode != ModeApproximate {
			// The worker left or now publishes events: its guessed
			// blocks went with the old view.
			delete(r.approx, src)
		} else if len(gone) > 0 {
			// Removing a hash the source no longer holds is counted by the
			// index and otherwise harmless.
			_ = r.set.Apply(src, index.Op{Kind: index.OpRemove, Tier: kvevents.TierDevice, Hashes: gone})
		}
		r.mu.RUnlock()
		if len(m) == 0 {
			delete(r.approx, src)
		}
	}
}
