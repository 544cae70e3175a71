// This file holds Sink: one worker's event stream fed into the router's inventory.

package router

import (
	"fmt"

	"kvrouter/internal/index"
)

// Sink feeds one worker's event stream into the router: a state agent's
// relay (it satisfies relay.Sink) or the engine's own events. Sources are
// the worker's rank sources and cache owners; an owner the stream reports
// before the registration names it is taken as the worker's.
//
// A sink is bound to one incarnation of its worker: once the worker leaves,
// or a newer sink is made for it, its calls change nothing, so a stream
// still draining cannot resurrect a worker or touch a detached owner.
type Sink struct {
	r   *Router
	id  string
	gen uint64
}

// Sink returns the sink of worker id, superseding any earlier one, and marks
// the worker's sources not ready until the new stream says otherwise (for
// an agent) or at once ready (an engine stream, which has no snapshot).
func (r *Router) Sink(id string) (*Sink, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.workers[id]
	if e == nil {
		return nil, fmt.Errorf("%w: %s is not registered", ErrBadWorker, id)
	}
	r.gen++
	e.gen = r.gen
	ready := e.w.Origin == OriginFlag
	for rank := e.w.DPStart; rank < e.w.DPStart+e.w.DPSize; rank++ {
		r.ready[index.WorkerRank(id, rank)] = ready
	}
	for oid, o := range r.owners {
		if o.worker == id {
			r.ready[index.CacheOwner(oid)] = ready
		}
	}
	return &Sink{r: r, id: id, gen: e.gen}, nil
}

// current reports whether s still feeds its worker and src is one of the
// worker's sources; with claim it takes an unknown owner. Callers hold mu.
func (s *Sink) current(src index.Source, claim bool) bool {
	e := s.r.workers[s.id]
	if e == nil || e.gen != s.gen {
		return false
	}
	if !src.IsOwner() {
		return src.Worker == s.id && e.w.HasRank(src.Rank)
	}
	o := s.r.owners[src.Owner]
	switch {
	case o != nil:
		return o.worker == s.id
	case !claim:
		return false
	}
	if err := s.r.register(src, e.w.Model, e.w.BlockSize); err != nil {
		return false
	}
	s.r.owners[src.Owner] = &owner{worker: s.id, rank: -1, origin: e.w.Origin, slot: s.r.slots[src]}
	s.r.unlink()
	return true
}

// Reset drops what src holds and marks it not ready.
func (s *Sink) Reset(src index.Source) {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	if !s.current(src, true) {
		return
	}
	s.r.clearSource(src)
	s.r.ready[src] = false
}

// Clear drops what src holds and keeps its readiness: an engine stream that
// lost events starts over from what it reports next.
func (s *Sink) Clear(src index.Source) {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	if s.current(src, true) {
		s.r.clearSource(src)
	}
}

// Apply applies ops of src. Ops of a source the worker does not own are
// dropped: they cannot be routed to or named.
func (s *Sink) Apply(src index.Source, ops []index.Op) error {
	s.r.mu.RLock()
	ok := s.current(src, false)
	if ok {
		src = s.r.canonical(src)
		// Applied under the read lock so that Remove, which takes the
		// write lock, cannot interleave and leave blocks of a gone source.
		err := s.r.set.Apply(src, ops...)
		s.r.mu.RUnlock()
		return err
	}
	s.r.mu.RUnlock()
	if !src.IsOwner() {
		return nil
	}
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	if !s.current(src, true) {
		return nil
	}
	return s.r.set.Apply(s.r.canonical(src), ops...)
}

// SetReady marks src usable (or not) as a hint source.
func (s *Sink) SetReady(src index.Source, ready bool) {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	if s.current(src, true) {
		s.r.ready[src] = ready
	}
}

// Gone forgets what src holds: the stream says it no longer exists.
func (s *Sink) Gone(src index.Source) {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	if !s.current(src, false) {
		return
	}
	if !src.IsOwner() {
		s.r.clearSource(src)
		s.r.ready[src] = false
		return
	}
	if o := s.r.owners[src.Owner]; o.rank < 0 {
		// Nobody registered it: nothing to keep.
		s.r.dropSource(src)
		delete(s.r.owners, src.Owner)
		return
	}
	s.r.clearSource(src)
	s.r.ready[src] = false
}
