// This file holds the hinted pulls in flight per source, which the pull estimate of the next hint shares the source with.

package router

import (
	"sync"

	"kvrouter/internal/index"
)

// pulls counts the blocks of hinted pulls not finished yet, per source: a
// burst hinted to one source shares its transfer, and a pull that queues
// behind others can cost more than recomputing. It has a lock of its own,
// held for a map access: hint selection reads it, hinted requests write
// it, and neither should wait on the router's.
type pulls struct {
	mu    sync.Mutex
	bySrc map[index.Source]int
	byID  map[string]pulling
}

type pulling struct {
	src    index.Source
	blocks int
}

// maxPullsInFlight bounds the tally: past it a new pull is not counted (a
// request whose end was never reported cannot grow it without bound).
const maxPullsInFlight = 1 << 16

func (p *pulls) of(src index.Source) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bySrc[src]
}

// StartPull records that the request id, decided as d, was sent with its
// hint: its pull from the hint's source runs until EndPull(id). A decision
// without a hint, or an id already counted, changes nothing.
func (r *Router) StartPull(id string, d *Decision) {
	if d == nil || !d.HintDecision.Hinted() || d.HintDecision.Estimate.ExtraBlocks <= 0 {
		return
	}
	p := &r.pulls
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.byID[id]; ok || len(p.byID) >= maxPullsInFlight {
		return
	}
	if p.byID == nil {
		p.byID, p.bySrc = map[string]pulling{}, map[index.Source]int{}
	}
	pl := pulling{src: d.HintDecision.Source, blocks: d.HintDecision.Estimate.ExtraBlocks}
	p.byID[id] = pl
	p.bySrc[pl.src] += pl.blocks
}

// EndPull records that request id's pull is over: its first token came,
// or it ended. Unknown ids are ignored, so calling it twice is harmless.
func (r *Router) EndPull(id string) {
	p := &r.pulls
	p.mu.Lock()
	defer p.mu.Unlock()
	pl, ok := p.byID[id]
	if !ok {
		return
	}
	delete(p.byID, id)
	if p.bySrc[pl.src] -= pl.blocks; p.bySrc[pl.src] <= 0 {
		delete(p.bySrc, pl.src)
	}
}
