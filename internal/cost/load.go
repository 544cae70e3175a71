// This file holds the in-flight load per rank that the cost weighs.

package cost

import "sync"

// Rank names one (worker, dp_rank).
type Rank struct {
	Worker string
	DP     int
}

// Load tracks what is in flight on each rank, from the requests this router
// (and, when replicas share it, its peers) sent. A request counts its prompt
// as prefill tokens until its first token, then its blocks as decode blocks
// until it ends.
type Load struct {
	mu    sync.Mutex
	ranks map[Rank]*RankLoad
	reqs  map[string]inflight
}

// RankLoad is one rank's in-flight work.
type RankLoad struct {
	PrefillTokens float64
	DecodeBlocks  float64
	Requests      int
}

type inflight struct {
	rank      Rank
	prefill   float64
	blocks    float64
	prefilled bool
}

// NewLoad returns an empty tracker.
func NewLoad() *Load {
	return &Load{ranks: map[Rank]*RankLoad{}, reqs: map[string]inflight{}}
}

// Start records a request sent to r; a repeated id is ignored, which makes
// replaying a peer replica's announcements idempotent.
func (l *Load) Start(id string, r Rank, prefillTokens, blocks float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.reqs[id]; ok {
		return
	}
	l.reqs[id] = inflight{rank: r, prefill: prefillTokens, blocks: blocks}
	rl := l.rank(r)
	rl.PrefillTokens += prefillTokens
	rl.DecodeBlocks += blocks
	rl.Requests++
}

// Prefilled records the first token: the prompt no longer waits for prefill.
func (l *Load) Prefilled(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, ok := l.reqs[id]
	if !ok || f.prefilled {
		return
	}
	f.prefilled = true
	l.reqs[id] = f
	l.rank(f.rank).PrefillTokens -= f.prefill
}

// Finish removes a request.
func (l *Load) Finish(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, ok := l.reqs[id]
	if !ok {
		return
	}
	delete(l.reqs, id)
	rl := l.rank(f.rank)
	if !f.prefilled {
		rl.PrefillTokens -= f.prefill
	}
	rl.DecodeBlocks -= f.blocks
	rl.Requests--
	if rl.Requests == 0 {
		delete(l.ranks, f.rank)
	}
}

// Forget drops every request on a worker that left.
func (l *Load) Forget(worker string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, f := range l.reqs {
		if f.rank.Worker == worker {
			delete(l.reqs, id)
		}
	}
	for r := range l.ranks {
		if r.Worker == worker {
			delete(l.ranks, r)
		}
	}
}

// Of returns r's load.
func (l *Load) Of(r Rank) RankLoad {
	l.mu.Lock()
	defer l.mu.Unlock()
	if rl, ok := l.ranks[r]; ok {
		return *rl
	}
	return RankLoad{}
}

// Each calls f with every rank that has work in flight, under one lock: a
// decision reads the load of a thousand ranks, and a lock and a map lookup
// per rank cost more than the rest of the decision. f must not call back
// into l.
func (l *Load) Each(f func(Rank, RankLoad)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for r, rl := range l.ranks {
		f(r, *rl)
	}
}

func (l *Load) rank(r Rank) *RankLoad {
	rl, ok := l.ranks[r]
	if !ok {
		rl = &RankLoad{}
		l.ranks[r] = rl
	}
	return rl
}
