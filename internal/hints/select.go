// This file holds Select: the source a target should pull from, and why a hint is or is not sent.

package hints

import (
	"slices"

	"kvrouter/internal/index"
)

// Meta is what the router knows about one source or target rank.
type Meta struct {
	CanConsume bool // advertises router_hint
	Type       WorkerType
	Endpoint   string // its rank's source control endpoint
	Ready      bool   // its event stream is caught up
	// Detached marks a cache owner whose worker left: its runner still
	// serves, so it stays a source, but nothing can be routed to it.
	Detached bool
}

// Candidate is one source's match against the request.
type Candidate struct {
	Source index.Source
	// Depth is the matched prefix in blocks from the root, on the device
	// tier or a runner-owned tier.
	Depth int
	// Chain holds the source's engine hashes for blocks [0, Depth) as the
	// index retained them; shorter than Depth means truncated.
	Chain []uint64
	// HashConflict: the source's engine hashes disagree with the target's,
	// so the target could not look the pulled blocks up.
	HashConflict bool
	// SaltKnown: every block the source holds was stored with its cache
	// salt known (index.Index.SaltKnown). The salt is part of a block's
	// identity (kvhash.SeedFor seeds the local hashes with it), so a match
	// is under the request's own salt only if the source reported its
	// salts; a source that stored blocks of unknown salt (a runner whose
	// stores lack vLLM's extra_keys) may hold another tenant's prefix
	// under an identity that looks unsalted, and is never a source. The
	// zero value fails closed.
	SaltKnown bool
}

// Request is the input to Select once the target is chosen.
type Request struct {
	Target       index.Source
	TargetMeta   Meta
	PrefixToBeat int // the target's own cached device prefix, in blocks
	// Chain is the request's engine block hashes as far as the target's
	// cache knows them (at least [0, PrefixToBeat) when available). It is
	// checked against the winner's chain.
	Chain []uint64
	// Candidates holds at most one entry per source; the index merges a
	// source's tiers into one depth.
	Candidates []Candidate
	// Meta looks a source up; false means unknown, which is never a source.
	Meta func(index.Source) (Meta, bool)
	// Queued, if set, says how many blocks of hinted pulls from a source
	// are still in flight (Pull.QueuedBlocks).
	Queued func(index.Source) int
}

// Reason says why Select produced a hint or not; its String is a metric
// label.
type Reason uint8

const (
	ReasonHinted           Reason = iota
	ReasonBadTarget               // target is a cache owner or detached
	ReasonNoCapability            // target lacks router_hint or a worker type
	ReasonNoCandidate             // nobody else matched the request
	ReasonNotBeyondTarget         // no source holds more than the target
	ReasonSelf                    // only the target itself holds more
	ReasonTypeMismatch            // the deepest source has another worker type
	ReasonSourceNotCapable        // ... lacks router_hint or an endpoint, or is unknown
	ReasonNotReady                // ... has an event stream still catching up
	ReasonConflict                // ... has engine hashes that disagree with the target's
	ReasonSaltUnknown             // ... holds blocks whose cache salt is not known
	// From here on a winner was chosen, then refused.
	ReasonChainTruncated  // the winner's depth exceeds its retained chain
	ReasonChainMismatch   // the winner's chain disagrees with the request's
	ReasonNotWorthPulling // the policy prefers recomputing
	ReasonDisabled        // the router runs without hints
)

var reasonNames = [...]string{
	ReasonHinted:           "hinted",
	ReasonBadTarget:        "bad_target",
	ReasonNoCapability:     "no_capability",
	ReasonNoCandidate:      "no_candidate",
	ReasonNotBeyondTarget:  "not_beyond_target",
	ReasonSelf:             "self",
	ReasonTypeMismatch:     "type_mismatch",
	ReasonSourceNotCapable: "source_not_capable",
	ReasonNotReady:         "not_ready",
	ReasonConflict:         "conflict",
	ReasonSaltUnknown:      "salt_unknown",
	ReasonChainTruncated:   "chain_truncated",
	ReasonChainMismatch:    "chain_mismatch",
	ReasonNotWorthPulling:  "not_worth_pulling",
	ReasonDisabled:         "disabled",
}

func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// Decision explains a Select outcome.
type Decision struct {
	Reason Reason
	// Source and Reach describe the winner, set whenever one was chosen,
	// even if it was then refused (truncated, not worth it). For the
	// reasons that exclude a source they describe the deepest excluded
	// one instead.
	Source index.Source
	Reach  int // the prefix depth the target would hold, in blocks
	// Estimate is the policy's verdict, set when the policy was asked.
	Estimate Estimate
}

// Hinted reports whether Select produced a hint.
func (d Decision) Hinted() bool { return d.Reason == ReasonHinted }

// pick is the best prefix found so far.
type pick struct {
	ok    bool
	src   index.Source
	reach int
	chain []uint64 // retained hashes from the root on
	why   Reason   // for excluded picks
}

// better reports whether a prefix reaching reach from source s beats p.
func (p pick) better(reach int, s index.Source) bool {
	return !p.ok || reach > p.reach || reach == p.reach && s.Compare(p.src) < 0
}

// Select picks the source the target should pull from, following docs/wire.md
// §6.1 (Dynamo's best_source): the eligible source with the longest prefix beyond
// the target's own. A winner whose retained chain is too short fails closed
// rather than falling back to a runner-up, since the runner-up was judged by
// the same index that just proved stale. The policy then decides whether
// the extra blocks are worth pulling.
//
// Suffix runs (docs/wire.md §6.1: a source holding blocks [start, end) without the
// prefix before them) are not considered: the router's index matches
// root-aligned prefixes only, and no measurement showed a run worth adding.
func Select(req Request, policy Policy) (Hint, Decision) {
	if req.Target.Owner != "" || req.TargetMeta.Detached {
		return Hint{}, Decision{Reason: ReasonBadTarget}
	}
	if !req.TargetMeta.CanConsume || req.TargetMeta.Type == TypeUnknown {
		return Hint{}, Decision{Reason: ReasonNoCapability}
	}
	if len(req.Candidates) == 0 {
		return Hint{}, Decision{Reason: ReasonNoCandidate}
	}
	beat := max(req.PrefixToBeat, 0)

	var win, excluded pick
	for i := range req.Candidates {
		c := &req.Candidates[i]
		// Skip what cannot change the outcome before the Meta lookup, the
		// costly part. A skipped candidate is never the reported exclusion
		// either: that is only reported when nothing won, and something
		// already beats this one.
		if c.Depth <= beat || !win.better(c.Depth, c.Source) {
			continue
		}
		if why := eligible(req, c); why != ReasonHinted {
			if excluded.better(c.Depth, c.Source) {
				excluded = pick{ok: true, src: c.Source, reach: c.Depth, why: why}
			}
			continue
		}
		win = pick{ok: true, src: c.Source, reach: c.Depth, chain: c.Chain}
	}
	if !win.ok {
		if excluded.ok {
			return Hint{}, Decision{Reason: excluded.why, Source: excluded.src, Reach: excluded.reach}
		}
		return Hint{}, Decision{Reason: ReasonNotBeyondTarget}
	}
	d := Decision{Source: win.src, Reach: win.reach}
	if len(win.chain) < win.reach {
		d.Reason = ReasonChainTruncated
		return Hint{}, d
	}
	payload := win.chain[:win.reach]
	if !agrees(req.Chain, payload) {
		// The index says the hashes agree but the chains differ: it is
		// inconsistent, and an unsure router sends no hint.
		d.Reason = ReasonChainMismatch
		return Hint{}, d
	}
	pl := Pull{Source: win.src, Target: req.Target, ExtraBlocks: win.reach - beat}
	if req.Queued != nil {
		pl.QueuedBlocks = req.Queued(win.src)
	}
	d.Estimate = policy.Consider(pl)
	if !d.Estimate.Worth {
		d.Reason = ReasonNotWorthPulling
		return Hint{}, d
	}
	m, _ := req.Meta(win.src)
	return Hint{Endpoint: m.Endpoint, BlockHashes: slices.Clone(payload)}, d
}

// eligible applies docs/wire.md §6.1's source rules to c; it returns ReasonHinted for
// an eligible source.
func eligible(req Request, c *Candidate) Reason {
	if c.Source.Owner == "" && c.Source.Worker == req.Target.Worker && c.Source.Rank == req.Target.Rank {
		return ReasonSelf
	}
	if c.HashConflict {
		return ReasonConflict
	}
	if !c.SaltKnown {
		return ReasonSaltUnknown
	}
	if req.Meta == nil {
		return ReasonSourceNotCapable
	}
	m, ok := req.Meta(c.Source)
	switch {
	case !ok || !m.CanConsume || m.Endpoint == "":
		return ReasonSourceNotCapable
	case req.TargetMeta.Endpoint != "" && m.Endpoint == req.TargetMeta.Endpoint:
		// The target's own runner, reached through a cache owner: its
		// blocks are a local hit, not a pull.
		return ReasonSelf
	case m.Type != req.TargetMeta.Type:
		return ReasonTypeMismatch
	case !m.Ready:
		return ReasonNotReady
	case m.Detached && c.Source.Owner == "":
		// Only runner-owned blocks outlive their worker.
		return ReasonNotReady
	}
	return ReasonHinted
}

// agrees reports whether payload, a prefix from the root, matches chain
// wherever both are known.
func agrees(chain, payload []uint64) bool {
	n := min(len(chain), len(payload))
	return slices.Equal(chain[:n], payload[:n])
}
