// This file holds Decide: a request's candidates per block size, their cost, and the target's hint.

package router

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"

	"kvrouter/internal/cost"
	"kvrouter/internal/hints"
	"kvrouter/internal/index"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvhash"
)

// Request is what a decision needs to know about an inference request.
type Request struct {
	Model  string
	Tokens []uint32
	// Salt is the request's cache_salt: blocks stored under another salt
	// never match it.
	Salt string
	// LoRA is the LoRA adapter a request names besides its model (SGLang's
	// lora_path); see Resolve for the adapter a model names.
	LoRA string
	// Exclude lists workers not to choose (a retry after one refused).
	Exclude []string
	// Target, when set, forces the worker (an operator override); its
	// cheapest rank is chosen.
	Target string
	// Explain fills Decision.Candidates, for operators.
	Explain bool
	// Leg restricts the choice to the workers that can serve it (LegAny:
	// every worker). A forced Target is taken whatever its role.
	Leg Leg
	// Engine, when set, restricts the choice to workers of that engine: a
	// prefill leg speaks its decode worker's protocol.
	Engine string

	// weights, when set, price this decision instead of Config.Weights
	// (a decode leg's, see Plan).
	weights *cost.Weights
	// only, set by Decide, restricts the candidates to workers listing
	// this adapter.
	only string
}

// filtered reports whether the request leaves some workers out, so that
// the model's cached shape does not describe its choice.
func (req *Request) filtered() bool {
	return req.Target != "" || len(req.Exclude) > 0 || req.Leg != LegAny || req.Engine != "" || req.only != ""
}

// Candidate is one (worker, dp_rank) as the decision priced it. Overlaps
// are in blocks of the worker's block size.
type Candidate struct {
	Worker                string
	Rank                  int
	OverlapBlocks         int
	DeviceOverlap         int
	HostOverlap           int
	DiskOverlap           int
	AdjustedPrefill       float64
	PotentialDecodeBlocks float64
	ActiveRequests        int
	Cost                  float64
}

// Target is the chosen (worker, global dp_rank).
type Target struct {
	Worker Worker
	Rank   int
}

// Decision is the outcome of Decide.
type Decision struct {
	// Model is the model whose workers were candidates, and LoRA the
	// adapter the request's blocks were identified under (Resolve).
	Model  string
	LoRA   string
	Target Target
	// Chosen is the target as priced; Candidates every rank priced, with
	// Request.Explain.
	Chosen     Candidate
	Candidates []Candidate
	Tokens     int
	// Blocks is the request's full blocks at the target's block size;
	// Overlap how many of them the target holds on any tier.
	Blocks  int
	Overlap int
	// Hint is set when HintDecision.Hinted(); it never changed Target.
	Hint         hints.Hint
	HintDecision hints.Decision

	local []uint64 // the request's local hashes at the target's block size
}

// ModelError is a request for a model no worker serves.
type ModelError struct {
	Model  string
	Served []string
	// Pending is set while the router has not yet read the workers'
	// registrations once (a router that just started): the model may be
	// served, and the client should retry rather than give up.
	Pending bool
}

func (e *ModelError) Error() string {
	served := "none"
	if len(e.Served) > 0 {
		served = strings.Join(e.Served, ", ")
	}
	if e.Pending {
		return fmt.Sprintf("model %q is not known yet: the router has not yet read the workers' registrations (discovery starting; served so far: %s); retry", e.Model, served)
	}
	return fmt.Sprintf("model %q is not served by any worker (served: %s)", e.Model, served)
}

func (e *ModelError) Unwrap() error { return ErrUnknownModel }

// group is the part of a decision shared by workers of one block size. Its
// slices are reused across decisions; nothing in a Decision points into
// them.
type group struct {
	bs      int
	ix      *index.Index
	local   []uint64
	ms      index.Matches // matches' memory, chains included
	matches []index.Match // ms.List
	slots   []int32       // by match: its source's slot, -1 for none
	at      []int32       // by source slot: 1 + the position of its match, 0 for none
	cands   []cost.Candidate
}

// match returns the match of the source in slot, if it matched.
func (g *group) match(slot int32) *index.Match {
	if slot < 0 || int(slot) >= len(g.at) || g.at[slot] == 0 {
		return nil
	}
	return &g.matches[g.at[slot]-1]
}

func (r *Router) newGroup(model string, bs int, tokens []uint32, seed uint64) *group {
	g, _ := r.scratch.Get().(*group)
	if g == nil {
		g = &group{}
	}
	g.bs, g.ix, g.local = bs, r.set.Index(model, bs), kvhash.LocalHashes(tokens, bs, seed)
	g.matches, g.slots, g.cands = g.matches[:0], g.slots[:0], g.cands[:0]
	if cap(g.at) < len(r.slotSrc) {
		g.at = make([]int32, len(r.slotSrc))
	}
	g.at = g.at[:len(r.slotSrc)]
	clear(g.at)
	if g.ix != nil && len(g.local) > 0 {
		g.ix.MatchInto(&g.ms, g.local, index.MatchOptions{Chains: true})
		g.matches = g.ms.List
		cache := r.caches[g.ix]
		for i := range g.matches {
			slot := r.slotOf(cache, &g.matches[i])
			if slot >= 0 {
				g.at[slot] = int32(i + 1)
			}
			g.slots = append(g.slots, slot)
		}
	}
	return g
}

func (r *Router) release(groups []*group) {
	for _, g := range groups {
		// Drop what would keep sources and hashes alive; the chains'
		// memory is kept for the next decision (hints copy theirs).
		clear(g.matches)
		g.ix, g.local = nil, nil
		r.scratch.Put(g)
	}
}

// Decide chooses the target for a request and the hint it gets. It sends
// nothing and records nothing: see Commit.
func (r *Router) Decide(req Request) (*Decision, error) {
	r.rlockLinked()
	defer r.mu.RUnlock()
	model, lora, only, ok := r.resolve(req.Model, req.LoRA)
	if !ok {
		return nil, r.modelErrorLocked(req.Model)
	}
	ents := r.models[model]
	req.only = only
	seed := kvhash.SeedFor(lora, req.Salt)
	var groups []*group
	defer func() { r.release(groups) }()
	ld := r.readLoads()
	defer r.releaseLoads(ld)
	groupOf := func(bs int) *group {
		for _, g := range groups {
			if g.bs == bs {
				return g
			}
		}
		g := r.newGroup(model, bs, req.Tokens, seed)
		groups = append(groups, g)
		return g
	}

	// A forced target is taken even when down: the operator asked for it.
	anyDown := r.down.Load() > 0 && req.Target == ""
	included := func(e *entry) bool {
		return (req.Target == "" || e.w.ID == req.Target) && !slices.Contains(req.Exclude, e.w.ID) &&
			(only == "" || slices.Contains(e.w.LoRAs, only)) && !(anyDown && e.down.Load()) &&
			(req.Target != "" || req.Leg.admits(&e.w)) && (req.Engine == "" || e.w.Engine == req.Engine)
	}
	sh, ok := r.shapes[model]
	if !ok || req.filtered() || anyDown {
		sh = shapeOf(ents, included)
	}
	bs, mixed, ranks := sh.bs, sh.mixed, sh.ranks
	if bs == 0 {
		if req.Target != "" {
			return nil, fmt.Errorf("%w: worker %q does not serve model %q", ErrNoWorker, req.Target, req.Model)
		}
		return nil, r.noneLeft(req, ents)
	}
	var t cost.Scored
	var g *group
	var scored []cost.Scored
	if !mixed && !req.Explain && r.picker.Routing == cost.RoutingKV && r.picker.Temperature == 0 {
		g = groupOf(bs)
		e, i := r.cheapest(g, ents, ranks, included, ld, req)
		if e == nil { // a worker went down since the shape was taken
			return nil, r.noneLeft(req, ents)
		}
		t = r.weightsFor(&req).Price(len(g.local), g.bs, r.candidate(g, e, i, ld))
	} else {
		for _, e := range ents {
			if !included(e) {
				continue
			}
			g := groupOf(e.w.BlockSize)
			for i := range e.w.DPSize {
				g.cands = append(g.cands, r.candidate(g, e, i, ld))
			}
		}
		// Costs are in blocks; workers with larger blocks get their costs
		// scaled to the smallest block size so that all compare in one unit.
		minBS := groups[0].bs
		for _, g := range groups[1:] {
			minBS = min(minBS, g.bs)
		}
		var of []*group
		scored, of = ld.scored[:0], ld.of
		for _, g := range groups {
			base := len(scored)
			scored = cost.AppendScores(scored, *r.weightsFor(&req), len(g.local), g.bs, g.cands)
			s := scored[base:]
			if g.bs != minBS {
				scale := float64(g.bs) / float64(minBS)
				for i := range s {
					s[i].Cost *= scale
				}
			}
			if len(groups) > 1 {
				for range s {
					of = append(of, g)
				}
			}
		}
		ld.scored, ld.of = scored, of
		pick := r.picker.Pick(scored, rand.New(rand.NewPCG(contentSeed(req, groups))))
		if pick < 0 {
			return nil, fmt.Errorf("%w: model %q", ErrNoWorker, req.Model)
		}
		t = scored[pick]
		g = groups[0]
		if len(of) > 0 {
			g = of[pick]
		}
	}
	d := &Decision{
		Model:   model,
		LoRA:    lora,
		Target:  Target{Worker: r.workers[t.Worker].w, Rank: t.Rank},
		Tokens:  len(req.Tokens),
		Blocks:  len(g.local),
		Overlap: t.DeviceOverlap + t.HostOverlap + t.DiskOverlap,
		Chosen:  candidateOf(t),
		local:   g.local,
	}
	if req.Explain {
		d.Candidates = make([]Candidate, len(scored))
		for i, s := range scored {
			d.Candidates[i] = candidateOf(s)
		}
	}
	if r.cfg.NoHints {
		d.HintDecision = hints.Decision{Reason: hints.ReasonDisabled}
	} else {
		d.Hint, d.HintDecision = r.hint(g, d.Target)
	}
	return d, nil
}

// noneLeft is the error of a decision that found every worker of the
// model excluded or down.
func (r *Router) noneLeft(req Request, ents []*entry) error {
	down := 0
	for _, e := range ents {
		if e.down.Load() {
			down++
		}
	}
	switch {
	case down == len(ents):
		return fmt.Errorf("%w: every worker of model %q is down (refusing connections or failing health probes)", ErrNoWorker, req.Model)
	case down > 0:
		return fmt.Errorf("%w: every worker of model %q is down or was excluded", ErrNoWorker, req.Model)
	}
	return fmt.Errorf("%w: every worker of model %q was excluded", ErrNoWorker, req.Model)
}

// Resolve returns the model whose workers serve requests naming model and
// lora (SGLang's lora_path, "" for none), and the LoRA adapter that
// identifies their blocks, as the engines decide it:
//
//   - a model some worker serves is itself, under lora;
//   - an adapter some workers list (vLLM names adapters as models: its
//     --lora-modules, listed in /v1/models with the base model as parent)
//     is its base model, under the adapter, served by those workers only;
//   - "base:adapter" with base served (SGLang's form; the adapter wins
//     over lora_path) is base under the adapter, served by the workers
//     listing it, or by all of base's when none lists adapters.
//
// ok is false when no worker serves the model.
func (r *Router) Resolve(model, lora string) (base, adapter string, ok bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	base, adapter, _, ok = r.resolve(model, lora)
	return base, adapter, ok
}

// resolve is Resolve, with the adapter candidates must list ("" for any).
// Callers hold mu.
func (r *Router) resolve(model, lora string) (base, adapter, only string, ok bool) {
	if len(r.models[model]) > 0 {
		return model, lora, "", true
	}
	if b, found := r.adapters[model]; found {
		return b, model, model, true
	}
	if b, a, cut := strings.Cut(model, ":"); cut && a != "" && len(r.models[b]) > 0 {
		if r.adapters[a] == b {
			return b, a, a, true
		}
		return b, a, "", true
	}
	return "", "", "", false
}

// servedLocked lists the models and adapters requests may name. Callers
// hold mu.
func (r *Router) servedLocked() []string {
	out := slices.Collect(maps.Keys(r.models))
	for a := range r.adapters {
		if len(r.models[a]) == 0 {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return out
}

func candidateOf(s cost.Scored) Candidate {
	return Candidate{
		Worker: s.Worker, Rank: s.Rank,
		OverlapBlocks: s.DeviceOverlap + s.HostOverlap + s.DiskOverlap,
		DeviceOverlap: s.DeviceOverlap, HostOverlap: s.HostOverlap, DiskOverlap: s.DiskOverlap,
		AdjustedPrefill: s.AdjustedPrefill, PotentialDecodeBlocks: s.PotentialDecodeBlocks,
		ActiveRequests: s.ActiveRequests, Cost: s.Cost,
	}
}

// candidate gathers the overlaps and load of the worker's i-th rank.
func (r *Router) candidate(g *group, e *entry, i int, ld *loads) cost.Candidate {
	var c cost.Candidate
	r.fill(&c, g, e, i, ld)
	return c
}

// fill is candidate writing in place: a decision prices a thousand ranks.
func (r *Router) fill(c *cost.Candidate, g *group, e *entry, i int, ld *loads) {
	w := &e.w
	rank := w.DPStart + i
	*c = cost.Candidate{Worker: w.ID, Rank: rank}
	depth := 0
	ref := &e.ranks[i]
	if m := g.match(ref.slot); m != nil {
		c.DeviceOverlap = int(m.DeviceDepth)
		c.HostOverlap = int(m.Tiers[kvevents.TierHost] + m.Tiers[kvevents.TierExternal])
		c.DiskOverlap = int(m.Tiers[kvevents.TierDisk])
		depth = int(m.Depth)
	}
	// The slot check guards against an owner another worker claimed since
	// (its slot may have been reused).
	if os := ref.ownerSlot; os >= 0 && r.slotSrc[os].Owner == ref.owner {
		// The rank's own runner restores its runner-owned blocks locally,
		// as fast as host offload: they extend the host overlap.
		if m := g.match(os); m != nil && int(m.Depth) > depth {
			c.HostOverlap += int(m.Depth) - depth
		}
	}
	l := ld.by[ref.slot]
	c.ActivePrefillTokens, c.ActiveDecodeBlocks, c.ActiveRequests = l.PrefillTokens, l.DecodeBlocks, l.Requests
	if len(r.engine) > 0 {
		if el, ok := r.engine[cost.Rank{Worker: w.ID, DP: rank}]; ok {
			// The engine sees requests other routers sent; take whichever
			// view shows more work.
			c.ActiveRequests = max(c.ActiveRequests, int(el.Running+el.Waiting))
			c.ActiveDecodeBlocks = max(c.ActiveDecodeBlocks, el.KVUsedBlocks)
		}
	}
	c.TreeSize = int(r.tree[ref.slot])
}

// hint runs hint selection for the chosen target. It never changes the
// target.
func (r *Router) hint(g *group, t Target) (hints.Hint, hints.Decision) {
	tsrc := index.WorkerRank(t.Worker.ID, t.Rank)
	req := hints.Request{
		Target: tsrc,
		Meta:   r.meta,
		Queued: r.pulls.of,
	}
	req.TargetMeta, _ = r.meta(req.Target)
	if t.Worker.Mode == ModeApproximate {
		// Its prefix is a guess: no prefix to beat can be trusted.
		req.TargetMeta = hints.Meta{}
	}
	if slot, ok := r.slots[tsrc]; ok {
		if tm := g.match(slot); tm != nil {
			req.PrefixToBeat, req.Chain = int(tm.DeviceDepth), tm.Chain
		}
	}
	shallow := false // some source but the target cannot beat its prefix
	for i := range g.matches {
		m := &g.matches[i]
		depth := int(m.Depth)
		var src index.Source
		if depth > req.PrefixToBeat { // else no tier of it can win
			src = m.Source()
			if !src.IsOwner() {
				// A worker's own blocks are pulled from its device;
				// its lower tiers are not served to peers.
				depth = int(m.DeviceDepth)
			}
		}
		if depth <= req.PrefixToBeat {
			// Cannot win; skipping spares the lookups. The target is
			// compared once one is shallow, not with every candidate:
			// with hundreds, that comparison was 2% of a decision.
			if !shallow && m.Source() != tsrc {
				shallow = true
			}
			continue
		}
		if src == tsrc {
			continue
		}
		guess := false
		if !src.IsOwner() {
			e := r.workers[src.Worker]
			guess = e != nil && e.w.Mode == ModeApproximate
		}
		req.Candidates = append(req.Candidates, hints.Candidate{
			Source: src,
			Depth:  depth,
			Chain:  m.Chain,
			// A guess carries made-up engine hashes: comparing them
			// means nothing (and Meta refuses the source anyway).
			HashConflict: !guess && g.ix.Conflict(tsrc, src),
			SaltKnown:    g.ix.SaltKnown(src),
		})
	}
	h, d := hints.Select(req, r.policies[g.bs])
	if d.Reason == hints.ReasonNoCandidate && shallow {
		d.Reason = hints.ReasonNotBeyondTarget
	}
	return h, d
}

// meta is what hint selection knows about a source. Callers hold mu.
func (r *Router) meta(s index.Source) (hints.Meta, bool) {
	if s.Owner != "" {
		o := r.owners[s.Owner]
		if o == nil {
			return hints.Meta{}, false
		}
		if o.worker == "" {
			m := o.meta
			m.Ready = m.Ready && r.trusted(o.origin)
			return m, true
		}
		e := r.workers[o.worker]
		if e == nil || e.w.Mode == ModeApproximate {
			return hints.Meta{}, false
		}
		var m hints.Meta
		if o.rank >= 0 {
			m = e.w.Capability.Meta(o.rank)
		}
		m.Ready = r.ready[index.CacheOwner(s.Owner)] && r.trusted(o.origin)
		return m, true
	}
	e := r.workers[s.Worker]
	if e == nil || !e.w.HasRank(s.Rank) || e.w.Mode == ModeApproximate {
		return hints.Meta{}, false
	}
	m := e.w.Capability.Meta(s.Rank)
	// A down worker's device blocks went with its engine, or cannot be
	// reached: no peer may be told to pull them.
	m.Ready = r.ready[index.WorkerRank(s.Worker, s.Rank)] && r.trusted(e.w.Origin) && !e.down.Load()
	return m, true
}

// contentSeed seeds tie-breaking from the whole request, so that every
// replica breaks a tie for identical requests the same way while requests
// that merely share a prefix still spread.
func contentSeed(req Request, groups []*group) (uint64, uint64) {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	g := groups[0]
	for _, l := range g.local {
		h = (h ^ l) * prime
	}
	// The partial tail, and the salt, which the hashes carry only when a
	// full block exists.
	for _, t := range req.Tokens[len(g.local)*g.bs:] {
		h = (h ^ uint64(t)) * prime
	}
	for i := 0; i < len(req.Salt); i++ {
		h = (h ^ uint64(req.Salt[i])) * prime
	}
	return h, uint64(len(req.Tokens))
}
