// This file holds Source and its interning into the small ids that holder words carry.

package index

import (
	"cmp"
	"fmt"
	"sync"
	"sync/atomic"
)

// Source is where blocks reside. Exactly one of Worker and Owner is set:
//   - a worker rank (Worker, Rank): framework-owned residency, which ends
//     with the engine process;
//   - a cache owner (Owner, docs/wire.md §5.7): runner-owned residency, which can
//     outlive the worker that stored it.
//
// Hint selection names its sources and targets with it too.
type Source struct {
	Worker string
	Rank   int
	Owner  string
}

// WorkerRank returns the source of a worker's data-parallel rank.
func WorkerRank(worker string, rank int) Source { return Source{Worker: worker, Rank: rank} }

// CacheOwner returns the source of a cache owner's runner-owned blocks.
func CacheOwner(owner string) Source { return Source{Owner: owner} }

// IsOwner reports whether s is a cache owner.
func (s Source) IsOwner() bool { return s.Owner != "" }

func (s Source) String() string {
	if s.Owner != "" {
		return "owner:" + s.Owner
	}
	return fmt.Sprintf("%s/%d", s.Worker, s.Rank)
}

// Compare orders sources the way hint selection breaks ties: worker ranks
// before cache owners, then by id and rank.
func (s Source) Compare(o Source) int {
	if (s.Owner == "") != (o.Owner == "") {
		if s.Owner == "" {
			return -1
		}
		return 1
	}
	if c := cmp.Compare(s.Owner, o.Owner); c != 0 {
		return c
	}
	if c := cmp.Compare(s.Worker, o.Worker); c != 0 {
		return c
	}
	return cmp.Compare(s.Rank, o.Rank)
}

func (s Source) validate() error {
	switch {
	case s.Worker == "" && s.Owner == "":
		return fmt.Errorf("%w: set Worker (a worker rank) or Owner (a cache owner)", ErrSource)
	case s.Worker != "" && s.Owner != "":
		return fmt.Errorf("%w: %q sets both Worker and Owner %q", ErrSource, s.Worker, s.Owner)
	case s.Owner == "" && s.Rank < 0:
		return fmt.Errorf("%w: worker %q has negative Rank %d", ErrSource, s.Worker, s.Rank)
	case s.Owner != "" && s.Rank != 0:
		return fmt.Errorf("%w: owner %q sets Rank %d", ErrSource, s.Owner, s.Rank)
	}
	return nil
}

// source is one interned source. Its mutex orders its writes: ops of one
// source apply in order, ops of different sources in parallel.
type source struct {
	mu  sync.Mutex
	id  uint32
	gen uint32 // Match.Gen
	key Source
	// engine maps the source's engine hashes to the identities it stored
	// them at. An entry may be stale (the evictor removed the holder and
	// has not cleaned up yet): readers verify against the node.
	engine engineTable
	held   atomic.Int64 // nodes this source holds, on any tier
	// saltUnknown: the source stored blocks whose cache salt could not be
	// known (Op.SaltUnknown), until it holds nothing: hint selection
	// never names it (SaltKnown).
	saltUnknown atomic.Bool
	gone        bool // removed; an Apply that raced with removal re-resolves
	// Counter changes of the Apply under way, published when it ends:
	// one atomic add per Apply rather than three per block.
	dHeld, dBlocks int64
	seqs           []uint64 // store scratch
	memo           setMemo  // set tokens' memo for the op under way (tokens.go)
	scratch        []engineSlot
}

// registry interns sources into small ids: holder words carry the id, not
// the Source, which keeps a (block, source) pair at 4 bytes.
type registry struct {
	mu    sync.RWMutex
	byKey map[Source]*source
	// byID is copy-on-write so that Match maps ids back to sources without
	// a lock.
	byID atomic.Pointer[idTable]
	free []uint32
	gen  uint32 // the last source's Match.Gen
}

// idTable is the sources by id, nil for a free id, and their keys beside
// them: a match over hundreds of sources reads the keys from one dense
// array rather than one cache line of each source.
type idTable struct {
	srcs []*source
	keys []Source
	gens []uint32 // Match.Gen
}

// with returns a copy of t with id set to s (nil to free it).
func (t *idTable) with(id uint32, s *source) *idTable {
	n := max(len(t.srcs), int(id)+1)
	c := &idTable{srcs: make([]*source, n), keys: make([]Source, n), gens: make([]uint32, n)}
	copy(c.srcs, t.srcs)
	copy(c.keys, t.keys)
	copy(c.gens, t.gens)
	c.srcs[id], c.keys[id], c.gens[id] = s, Source{}, 0
	if s != nil {
		c.keys[id], c.gens[id] = s.key, s.gen
	}
	return c
}

// holds reports whether id names a source in t.
func (t *idTable) holds(id uint32) bool {
	return int(id) < len(t.srcs) && t.srcs[id] != nil
}

func (r *registry) init() {
	r.byKey = make(map[Source]*source)
	r.byID.Store(&idTable{})
}

func (r *registry) lookup(key Source) *source {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.byKey[key]
}

// resolve returns key's source, interning it when new.
func (r *registry) resolve(key Source) (*source, error) {
	if s := r.lookup(key); s != nil {
		return s, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.byKey[key]; s != nil {
		return s, nil
	}
	if err := key.validate(); err != nil {
		return nil, err
	}
	old := r.byID.Load()
	var id uint32
	if n := len(r.free); n > 0 {
		id = r.free[n-1]
		r.free = r.free[:n-1]
	} else {
		id = uint32(len(old.srcs))
		if id > maxSourceID {
			return nil, fmt.Errorf("%w: more than %d sources", ErrSource, maxSourceID+1)
		}
	}
	r.gen++
	s := &source{id: id, gen: r.gen, key: key}
	r.byID.Store(old.with(id, s))
	r.byKey[key] = s
	return s, nil
}

// drop forgets s and frees its id. The caller has removed all its holders.
func (r *registry) drop(s *source) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byKey[s.key] != s {
		return
	}
	delete(r.byKey, s.key)
	r.byID.Store(r.byID.Load().with(s.id, nil))
	r.free = append(r.free, s.id)
}

func (r *registry) ids() []*source { return r.byID.Load().srcs }

func (r *registry) table() *idTable { return r.byID.Load() }

func (r *registry) count() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.byKey)
}

// conflicts records pairs of sources that reported different engine hashes
// for the same block: their hash seeds differ, so one cannot look up blocks
// under the other's hashes, and a hint must never pair them.
type conflicts struct {
	mu    sync.RWMutex
	pairs map[uint64]struct{}
}

func pairKey(a, b uint32) uint64 {
	if a > b {
		a, b = b, a
	}
	return uint64(a)<<32 | uint64(b)
}

// add records the pair and reports whether it is new.
func (c *conflicts) add(a, b uint32) bool {
	k := pairKey(a, b)
	c.mu.RLock()
	_, ok := c.pairs[k]
	c.mu.RUnlock()
	if ok {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pairs == nil {
		c.pairs = make(map[uint64]struct{})
	}
	if _, ok := c.pairs[k]; ok {
		return false
	}
	c.pairs[k] = struct{}{}
	return true
}

func (c *conflicts) has(a, b uint32) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	_, ok := c.pairs[pairKey(a, b)]
	return ok
}

// forget drops every pair of id, before id is reused.
func (c *conflicts) forget(id uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.pairs {
		if uint32(k>>32) == id || uint32(k) == id {
			delete(c.pairs, k)
		}
	}
}

func (c *conflicts) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.pairs)
}
