// This file holds the peer credit: what a hint could bring a candidate, priced into its cost before the choice.

package router

import (
	"kvrouter/internal/cost"
	"kvrouter/internal/hints"
)

// peerLine is what a pull from the request's best hint source is worth to
// a rank that lacks x of its blocks, in blocks of recompute: x − a − b·x,
// the blocks it need not recompute less the pull's predicted time in the
// same unit (a for the pull's fixed cost, b per block). ok is false when
// no pull is predicted to pay, so no rank gets credit.
type peerLine struct {
	depth int     // the deepest prefix a ready hint source holds, in blocks
	a, b  float64 // the pull's cost: a + b·x blocks of recompute
	ok    bool
}

// credit is what the peer's prefix is worth to a rank that holds own
// blocks of it itself (cost.Candidate.SharedBeyond).
func (p *peerLine) credit(own int) float64 {
	if !p.ok || own >= p.depth {
		return 0
	}
	x := float64(p.depth - own)
	return max(0, x-p.a-p.b*x)
}

// peerLineOf prices the best hint source of g's request once per decision,
// with the fleet-wide estimates of the group's hint policy (no target:
// the candidates are not chosen yet). Without Config.PeerCredit, a policy
// that predicts no times (min-blocks) or a source worth pulling from, the
// line gives no credit. Callers hold mu.
func (r *Router) peerLineOf(g *group) peerLine {
	if !r.cfg.PeerCredit || r.cfg.NoHints || len(g.matches) == 0 {
		return peerLine{}
	}
	pol := r.policies[g.bs]
	if pol == nil {
		return peerLine{}
	}
	// The matches come deepest first: the first a peer could be told to
	// pull from is the best. A worker serves peers from its device only.
	for i := range g.matches {
		m := &g.matches[i]
		src := m.Source()
		depth := int(m.Depth)
		if !src.IsOwner() {
			depth = int(m.DeviceDepth)
		}
		if depth == 0 {
			continue
		}
		if meta, ok := r.meta(src); !ok || !meta.Ready || !g.ix.SaltKnown(src) {
			continue
		}
		return lineOf(pol.Consider(hints.Pull{Source: src, ExtraBlocks: depth, QueuedBlocks: r.pulls.of(src)}), depth)
	}
	return peerLine{}
}

// lineOf turns a policy's estimate of pulling depth blocks into a line.
func lineOf(e hints.Estimate, depth int) peerLine {
	if !e.Worth || e.Recompute <= 0 || e.Pull <= 0 || depth <= 0 {
		return peerLine{}
	}
	perBlock := e.Recompute.Seconds() / float64(depth)
	setup := min(e.Setup, e.Pull)
	a := setup.Seconds() / perBlock
	b := (e.Pull - setup).Seconds() / perBlock / float64(depth)
	return peerLine{depth: depth, a: a, b: b, ok: true}
}

// floorDepth is the depth a cost floor must assume for ranks whose own
// match is at most d deep, given the peer line, and whether the floor
// still bounds: every rank's credit, own blocks and the peer's together,
// is at most the best tier's rate times max(d, the peer's depth) only while
// the peer's credit per block (1 − b) is at most that rate.
func (p *peerLine) floorDepth(w *cost.Weights, d int) (int, bool) {
	if !p.ok {
		return d, true
	}
	return max(d, p.depth), 1-p.b <= max(w.OverlapCredit, w.HostCredit, w.DiskCredit)
}
