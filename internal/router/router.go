// This file holds the Router: its workers, ranks and cache owners, and their registration.

package router

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"kvrouter/internal/cost"
	"kvrouter/internal/hints"
	"kvrouter/internal/index"
)

// Config configures a Router.
type Config struct {
	Weights     cost.Weights
	Temperature float64
	// Routing chooses the target; "" is cost.RoutingKV. The baselines
	// exist to measure kv routing against.
	Routing cost.Routing
	// NoHints turns hints off: every decision says hints.ReasonDisabled,
	// and Policy may be nil.
	NoHints bool
	// Policy returns the hint policy for workers of a block size; a cost
	// estimate needs the bytes and tokens of a block.
	Policy func(blockSize int) (hints.Policy, error)
	// ApproxTTL is how long a routing decision stands in for the blocks of
	// an approximate-mode worker.
	ApproxTTL time.Duration
	// DetachedOwnerTTL is how long a cache owner stays a hint source after
	// its worker left. Nobody relays its removals any more, so the router
	// stops trusting it after that; 0 drops it at once.
	DetachedOwnerTTL time.Duration
	// MaxBlocks caps each (model, block size) index; 0 is unbounded.
	MaxBlocks int
	// MaxIndexBytes caps each (model, block size) index's estimated
	// memory (index.Config.MaxBytes); 0 is unbounded.
	MaxIndexBytes int64
	// Health paces health probes and says when a worker is down.
	Health HealthConfig
}

// EngineLoad is what a worker's engine reports about its own load.
type EngineLoad struct {
	Running, Waiting float64
	// KVUsage is the fraction of the KV cache in use (for operators);
	// KVUsedBlocks the blocks in use when the engine's figures tell
	// (0: unknown).
	KVUsage      float64
	KVUsedBlocks float64
}

// Router is the decision core. See the package comment.
type Router struct {
	cfg    Config
	set    *index.Set
	load   *cost.Load
	picker *cost.Picker

	mu       sync.RWMutex
	workers  map[string]*entry
	models   map[string][]*entry // sorted by id
	adapters map[string]string   // LoRA adapter -> the model of the workers listing it
	ready    map[index.Source]bool
	owners   map[string]*owner
	policies map[int]hints.Policy
	live     bool // the discovery watch is in step
	pulls    pulls
	awaiting bool // the discovery watch was never in step yet
	wasLive  bool // the discovery watch was in step once
	engine   map[cost.Rank]EngineLoad
	sizes    map[index.Source]Blocks
	gen      uint64

	// Every registered source has a dense slot so that a decision can find
	// a rank's match by array index rather than by hashing its Source.
	slots   map[index.Source]int32
	slotSrc []index.Source // by slot; zero when free
	// ownerRanks lists the ranks naming each cache owner as their own, so
	// that a decision finds the ranks an owner's match concerns.
	ownerRanks map[string][]tie
	// linked says refs (by slot) is current; caches (by index) lead from
	// an index's source numbers to slots. See links.go.
	linked  bool
	refs    []slotRef
	shapes  map[string]shape // by model
	caches  map[*index.Index]*slotCache
	tree    []int32 // by slot: blocks held, from RefreshSizes
	free    []int32
	scratch sync.Pool // *group
	loads   sync.Pool // *loads

	amu    sync.Mutex // approximate inventory; taken without mu held
	approx map[index.Source]map[uint64]time.Time

	hmu  sync.Mutex   // the entries' health records; taken after mu
	down atomic.Int32 // workers marked down
}

type entry struct {
	w   Worker
	pos int    // among its model's entries, sorted by id
	gen uint64 // the sink allowed to feed the worker's sources
	// ranks are the worker's ranks, by rank - DPStart.
	ranks []rankRef
	// down excludes the worker from decisions and its ranks from hint
	// sources; read without locks by decisions. See health.go.
	down atomic.Bool
	h    health // guarded by Router.hmu
}

// rankRef is what a decision needs of a rank beyond its worker, laid out
// flat: a decision walks a thousand of them.
type rankRef struct {
	slot int32 // the rank's source slot
	// ownerSlot is the slot of the rank's own cache owner (-1: none),
	// named owner.
	ownerSlot int32
	owner     string
}

// owner is a cache owner's standing: claimed by a worker's rank, or detached
// (its worker left) with what the router knew about it then.
type owner struct {
	worker string // "" once detached
	rank   int    // -1 while no registration names it
	origin Origin
	meta   hints.Meta // frozen at detach
	until  time.Time  // detached: dropped at this time
	slot   int32
}

// New returns an empty router.
func New(cfg Config) (*Router, error) {
	if cfg.Policy == nil && !cfg.NoHints {
		return nil, fmt.Errorf("router: Config.Policy is required unless NoHints")
	}
	if cfg.Temperature < 0 {
		return nil, fmt.Errorf("router: temperature %v must not be negative", cfg.Temperature)
	}
	if cfg.Routing == "" {
		cfg.Routing = cost.RoutingKV
	}
	if _, err := cost.ParseRouting(string(cfg.Routing)); err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	return &Router{
		cfg:      cfg,
		picker:   &cost.Picker{Routing: cfg.Routing, Temperature: cfg.Temperature},
		set:      index.NewSet(cfg.MaxBlocks, cfg.MaxIndexBytes),
		load:     cost.NewLoad(),
		workers:  map[string]*entry{},
		models:   map[string][]*entry{},
		ready:    map[index.Source]bool{},
		owners:   map[string]*owner{},
		policies: map[int]hints.Policy{},
		live:     true,
		engine:   map[cost.Rank]EngineLoad{},
		sizes:    map[index.Source]Blocks{},
		approx:   map[index.Source]map[uint64]time.Time{},
		slots:    map[index.Source]int32{},

		ownerRanks: map[string][]tie{},
		caches:     map[*index.Index]*slotCache{},
	}, nil
}

// Load is the in-flight tracker the router scores with; the services record
// requests (theirs and their peers') in it.
func (r *Router) Load() *cost.Load { return r.load }

// Upsert adds a worker or updates it; repeated registrations of the same
// worker (lease refreshes) change nothing. Ranks it no longer serves and
// owners it no longer claims are let go (owners detach).
func (r *Router) Upsert(w Worker, now time.Time) error {
	if err := w.Validate(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.policies[w.BlockSize]; !ok && r.cfg.Policy != nil {
		p, err := r.cfg.Policy(w.BlockSize)
		if err != nil {
			return fmt.Errorf("router: hint policy for block size %d: %w", w.BlockSize, err)
		}
		r.policies[w.BlockSize] = p
	}
	old := r.workers[w.ID]
	if old != nil && (old.w.Model != w.Model || old.w.BlockSize != w.BlockSize || old.w.Origin != w.Origin) {
		// Another engine behind the same id: start over.
		r.removeLocked(old.w.ID, now)
		old = nil
	}
	e := old
	var loras []string
	if e == nil {
		e = &entry{}
		r.workers[w.ID] = e
	} else {
		loras = e.w.LoRAs
		if old.w.URL != w.URL {
			// What was found about the old address says nothing of the new.
			r.resetHealth(e)
		}
	}
	if err := r.apply(e, w, old != nil, now); err != nil {
		// A registration the router cannot take in full is not taken at
		// all: half a worker would route on a view nobody maintains.
		e.w = w
		r.removeLocked(w.ID, now)
		return err
	}
	if old == nil || !slices.Equal(loras, w.LoRAs) {
		r.indexModels()
	}
	return nil
}

// apply brings e in line with w. Callers hold mu.
func (r *Router) apply(e *entry, w Worker, existed bool, now time.Time) error {
	prev := e.w
	for rank := prev.DPStart; rank < prev.DPStart+prev.DPSize; rank++ {
		if !w.HasRank(rank) {
			r.dropSource(index.WorkerRank(w.ID, rank))
		}
	}
	if existed && prev.Mode != w.Mode {
		// A switch between guessing and knowing: neither view is the other's.
		for rank := prev.DPStart; rank < prev.DPStart+prev.DPSize; rank++ {
			r.clearSource(index.WorkerRank(w.ID, rank))
		}
	}
	for rank := w.DPStart; rank < w.DPStart+w.DPSize; rank++ {
		src := index.WorkerRank(w.ID, rank)
		if err := r.register(src, w.Model, w.BlockSize); err != nil {
			return fmt.Errorf("router: worker %s rank %d: %w", w.ID, rank, err)
		}
		if _, ok := r.ready[src]; !ok {
			// An agent's relay says when it is in step; an engine stream
			// has no snapshot, so what the router has is all there is.
			r.ready[src] = w.Origin == OriginFlag
		}
	}
	for rank, id := range prev.Owners {
		if w.Owners[rank] != id {
			if o := r.owners[id]; o != nil && o.worker == w.ID {
				r.detach(id, o, &prev, now)
			}
		}
	}
	for rank, id := range w.Owners {
		src := index.CacheOwner(id)
		// Also for a known owner: one bound to another model's index
		// cannot extend this worker's prefixes.
		if err := r.register(src, w.Model, w.BlockSize); err != nil {
			return fmt.Errorf("router: worker %s cache owner %s: %w", w.ID, id, err)
		}
		o := r.owners[id]
		if o == nil {
			o = &owner{}
			r.owners[id] = o
			if _, ok := r.ready[src]; !ok {
				r.ready[src] = w.Origin == OriginFlag
			}
		} else if o.worker == "" {
			// Reattached: what it holds now comes through the worker's
			// stream, which has yet to say it is in step.
			r.ready[src] = w.Origin == OriginFlag
		}
		*o = owner{worker: w.ID, rank: rank, origin: w.Origin, slot: r.slots[src]}
	}
	e.w = w
	r.unlinkOwners(e)
	e.ranks = make([]rankRef, w.DPSize)
	for i := range w.DPSize {
		e.ranks[i] = rankRef{slot: r.slots[index.WorkerRank(w.ID, w.DPStart+i)], ownerSlot: -1}
		if id, ok := w.Owners[w.DPStart+i]; ok {
			e.ranks[i].ownerSlot, e.ranks[i].owner = r.slots[index.CacheOwner(id)], id
			r.ownerRanks[id] = append(r.ownerRanks[id], tie{e, i, e.ranks[i].slot})
		}
	}
	r.unlink()
	return nil
}

// Remove forgets a worker that left (deregistered or its lease expired).
// Its cache owners detach: their runners may still serve what they hold.
func (r *Router) Remove(id string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removeLocked(id, now)
}

func (r *Router) removeLocked(id string, now time.Time) {
	e := r.workers[id]
	if e == nil {
		return
	}
	for rank := e.w.DPStart; rank < e.w.DPStart+e.w.DPSize; rank++ {
		src := index.WorkerRank(id, rank)
		r.dropSource(src)
		delete(r.engine, cost.Rank{Worker: id, DP: rank})
	}
	for oid, o := range r.owners {
		if o.worker == id {
			r.detach(oid, o, &e.w, now)
		}
	}
	r.unlinkOwners(e)
	delete(r.workers, id)
	if e.down.Swap(false) {
		r.down.Add(-1)
	}
	r.unlink()
	r.load.Forget(id)
	r.indexModels()
}

// detach keeps an owner as a source without a worker, for DetachedOwnerTTL.
func (r *Router) detach(id string, o *owner, w *Worker, now time.Time) {
	src := index.CacheOwner(id)
	if r.cfg.DetachedOwnerTTL <= 0 {
		r.dropSource(src)
		delete(r.owners, id)
		return
	}
	m := hints.Meta{}
	if o.rank >= 0 {
		m = w.Capability.Meta(o.rank)
	}
	m.Ready = r.ready[src] && r.trusted(o.origin)
	m.Detached = true
	o.worker, o.meta, o.until = "", m, now.Add(r.cfg.DetachedOwnerTTL)
}

// Expire drops detached owners whose time is up and approximate blocks past
// their TTL. A service calls it on a ticker.
func (r *Router) Expire(now time.Time) {
	r.mu.Lock()
	for id, o := range r.owners {
		if o.worker == "" && !now.Before(o.until) {
			r.dropSource(index.CacheOwner(id))
			delete(r.owners, id)
		}
	}
	r.mu.Unlock()
	r.expireApprox(now)
}

// SetDiscoveryLive records whether the discovery watch is in step. While
// it is not, nothing a state agent registered may name a hint source: the
// router cannot tell a worker that left from one that stayed.
func (r *Router) SetDiscoveryLive(live bool) {
	r.mu.Lock()
	r.live = live
	r.wasLive = r.wasLive || live
	r.awaiting = !r.wasLive
	r.mu.Unlock()
}

// SetEngineLoad records what a rank's engine reports about its load.
func (r *Router) SetEngineLoad(worker string, rank int, l EngineLoad) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// A down worker's figures were read before it went down (a scrape
	// answered just before): they would stand for a load it no longer has.
	if e := r.workers[worker]; e != nil && e.w.HasRank(rank) && !e.down.Load() {
		r.engine[cost.Rank{Worker: worker, DP: rank}] = l
	}
}

// ClearEngineLoad forgets what worker's engine reported about its load: its
// figures cannot be read any more, and old ones would stand for a load it
// no longer has.
func (r *Router) ClearEngineLoad(worker string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.workers[worker]; e != nil {
		r.forgetEngine(e)
	}
}

// forgetEngine drops e's engine-reported loads. Callers hold mu for writing.
func (r *Router) forgetEngine(e *entry) {
	for rank := e.w.DPStart; rank < e.w.DPStart+e.w.DPSize; rank++ {
		delete(r.engine, cost.Rank{Worker: e.w.ID, DP: rank})
	}
}

// Worker returns a registered worker.
func (r *Router) Worker(id string) (Worker, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e := r.workers[id]
	if e == nil {
		return Worker{}, false
	}
	return e.w, true
}

// WorkersOf returns the workers serving model, sorted by id.
func (r *Router) WorkersOf(model string) []Worker {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Worker, 0, len(r.models[model]))
	for _, e := range r.models[model] {
		out = append(out, e.w)
	}
	return out
}

// AllWorkers returns every worker, sorted by id.
func (r *Router) AllWorkers() []Worker {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Worker, 0, len(r.workers))
	for _, e := range r.workers {
		out = append(out, e.w)
	}
	slices.SortFunc(out, func(a, b Worker) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// WorkersOfOrigin returns the ids of the workers that came from origin.
func (r *Router) WorkersOfOrigin(o Origin) []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []string
	for id, e := range r.workers {
		if e.w.Origin == o {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// CheckModel returns a *ModelError when no worker serves model: a request
// for it can be refused before any work is spent on it.
func (r *Router) CheckModel(model string) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if _, _, _, ok := r.resolve(model, ""); ok { // a model, or an adapter (Resolve)
		return nil
	}
	return r.modelErrorLocked(model)
}

func (r *Router) modelErrorLocked(model string) *ModelError {
	return &ModelError{Model: model, Served: r.servedLocked(), Pending: r.awaiting}
}

// Models returns the served models, sorted.
func (r *Router) Models() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.models))
}

// Adapters returns the LoRA adapters workers list, each with its base
// model.
func (r *Router) Adapters() map[string]string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return maps.Clone(r.adapters)
}

func (r *Router) trusted(o Origin) bool { return o != OriginDiscovery || r.live }

func (r *Router) indexModels() {
	clear(r.models)
	r.adapters = map[string]string{}
	for _, e := range r.workers {
		r.models[e.w.Model] = append(r.models[e.w.Model], e)
		for _, a := range e.w.LoRAs {
			r.adapters[a] = e.w.Model
		}
	}
	for _, es := range r.models {
		slices.SortFunc(es, func(a, b *entry) int {
			if a.w.ID < b.w.ID {
				return -1
			}
			if a.w.ID > b.w.ID {
				return 1
			}
			return 0
		})
		for i, e := range es {
			e.pos = i
		}
	}
}

// unlinkOwners takes e's ranks out of ownerRanks. Callers hold mu.
func (r *Router) unlinkOwners(e *entry) {
	r.unlink()
	for i, ref := range e.ranks {
		if ref.ownerSlot < 0 {
			continue // names no owner
		}
		ranks := slices.DeleteFunc(r.ownerRanks[ref.owner], func(t tie) bool { return t.e == e && t.i == i })
		if len(ranks) == 0 {
			delete(r.ownerRanks, ref.owner)
		} else {
			r.ownerRanks[ref.owner] = ranks
		}
	}
}

// register binds src to its index and gives it a slot. Callers hold mu.
func (r *Router) register(src index.Source, model string, blockSize int) error {
	ix, err := r.set.Register(src, model, blockSize)
	if err != nil {
		return err
	}
	if r.caches[ix] == nil {
		r.caches[ix] = &slotCache{}
	}
	if _, ok := r.slots[src]; ok {
		return nil
	}
	r.unlink()
	var slot int32
	if n := len(r.free); n > 0 {
		slot, r.free = r.free[n-1], r.free[:n-1]
	} else {
		slot = int32(len(r.slotSrc))
		r.slotSrc, r.tree = append(r.slotSrc, index.Source{}), append(r.tree, 0)
	}
	r.slots[src], r.slotSrc[slot], r.tree[slot] = slot, src, 0
	return nil
}

func (r *Router) dropSource(src index.Source) {
	r.unlink()
	r.set.Remove(src)
	delete(r.ready, src)
	delete(r.sizes, src)
	if slot, ok := r.slots[src]; ok {
		delete(r.slots, src)
		r.slotSrc[slot] = index.Source{}
		r.free = append(r.free, slot)
	}
}

func (r *Router) clearSource(src index.Source) {
	if ix, ok := r.set.IndexOf(src); ok {
		ix.RemoveSource(src)
	}
	delete(r.sizes, src)
}
