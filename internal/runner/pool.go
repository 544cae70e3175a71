// This file holds Pool, the pure core: preallocated block slots indexed by key.

package runner

import (
	"errors"
	"fmt"
)

// Sentinel errors of the pool and the runner.
var (
	// ErrExists: the key is already committed.
	ErrExists = errors.New("block already held")
	// ErrBusy: the key is being written (deposited or fetched) right now.
	ErrBusy = errors.New("block is being written")
	// ErrFull: every slot is pinned or being written; nothing can be evicted.
	ErrFull = errors.New("pool full: every slot is pinned or being written")
	// ErrNotFound: the key is not held.
	ErrNotFound = errors.New("block not held")
	// ErrConfig: a configuration value is invalid; the message names it.
	ErrConfig = errors.New("invalid runner configuration")
)

// PoolConfig sizes a pool.
type PoolConfig struct {
	// BlockBytes is the size of every block (one slot).
	BlockBytes int
	// Slots is the number of blocks the pool holds.
	Slots int
	// Policy builds the eviction policy for Slots slots; nil means NewLRU.
	Policy func(slots int) Policy
	// LowWatermark: Low reports true when free plus evictable slots fall
	// below it. 0 disables the signal.
	LowWatermark int
}

type slotState uint8

const (
	slotFree slotState = iota
	slotPending
	slotCommitted
	// slotDoomed: removed from the index while pinned; the slot returns to
	// the free list when its last pin goes.
	slotDoomed
)

type slot struct {
	key      uint64
	sum      uint64 // xxh3 of the block, valid when sumKnown
	pins     int32
	state    slotState
	sumKnown bool
}

// Lookup is what a pool knows about a key.
type Lookup uint8

const (
	Absent  Lookup = iota
	Pending        // being written; not readable yet
	Present        // committed and readable
)

// Reservation is a slot handed out for writing one block.
type Reservation struct {
	Slot int
	// Evicted is the key whose block was evicted to make room, when
	// HasEvicted is set; the caller reports its removal.
	Evicted    uint64
	HasEvicted bool
}

// PoolStats counts slots and lookups.
type PoolStats struct {
	Slots   int `json:"slots"`
	Used    int `json:"used"`    // committed blocks, readable
	Free    int `json:"free"`    // slots holding nothing
	Pinned  int `json:"pinned"`  // slots that can be neither evicted nor reused: claimed, no_evict, being written, or removed while claimed
	Pending int `json:"pending"` // slots being written (part of Pinned)

	Hits      uint64 `json:"hits"`      // Lookup (the runner's Query) found the key held
	Misses    uint64 `json:"misses"`    // Lookup found it absent or still being written
	Evictions uint64 `json:"evictions"` // blocks evicted to make room
	Removals  uint64 `json:"removals"`  // blocks removed on request (Remove, RemoveAll)
	Low       bool   `json:"low"`
}

// Pool is a fixed set of preallocated block slots with an index from key to
// slot. Writing a block is two steps, Reserve then Commit (or Abort), so the
// copy or network read in between needs no lock and a half-written block is
// never visible. Pool is not safe for concurrent use; Runner serialises it.
type Pool struct {
	blockBytes int
	mem        []byte
	slots      []slot
	index      map[uint64]int
	free       []int
	policy     Policy
	watermark  int

	pending, pinnedCommitted, doomed  int
	hits, misses, evictions, removals uint64
}

// NewPool allocates every slot up front, so a running pool never allocates
// block memory.
func NewPool(cfg PoolConfig) (*Pool, error) {
	if cfg.BlockBytes <= 0 {
		return nil, fmt.Errorf("%w: block bytes must be positive, got %d", ErrConfig, cfg.BlockBytes)
	}
	if cfg.Slots <= 0 {
		return nil, fmt.Errorf("%w: slots (capacity) must be positive, got %d", ErrConfig, cfg.Slots)
	}
	if cfg.BlockBytes > maxInt/cfg.Slots {
		return nil, fmt.Errorf("%w: block bytes %d × slots %d overflows", ErrConfig, cfg.BlockBytes, cfg.Slots)
	}
	if cfg.LowWatermark < 0 || cfg.LowWatermark > cfg.Slots {
		return nil, fmt.Errorf("%w: low watermark %d must be within 0..slots (%d)", ErrConfig, cfg.LowWatermark, cfg.Slots)
	}
	mk := cfg.Policy
	if mk == nil {
		mk = NewLRU
	}
	p := &Pool{
		blockBytes: cfg.BlockBytes,
		mem:        make([]byte, cfg.BlockBytes*cfg.Slots),
		slots:      make([]slot, cfg.Slots),
		index:      make(map[uint64]int, cfg.Slots),
		free:       make([]int, cfg.Slots),
		policy:     mk(cfg.Slots),
		watermark:  cfg.LowWatermark,
	}
	// Hand out low slots first: tests and debugging read more easily.
	for i := range p.free {
		p.free[i] = cfg.Slots - 1 - i
	}
	return p, nil
}

const maxInt = int(^uint(0) >> 1)

// BlockBytes returns the size of one block.
func (p *Pool) BlockBytes() int { return p.blockBytes }

// Buffer returns slot's memory. It is only safe to write while the slot is
// reserved and to read while it is pinned or reserved.
func (p *Pool) Buffer(slot int) []byte {
	off := slot * p.blockBytes
	return p.mem[off : off+p.blockBytes : off+p.blockBytes]
}

// Reserve takes a slot to write key's block into, evicting by policy when no
// slot is free. The key reads as Pending until Commit or Abort.
func (p *Pool) Reserve(key uint64) (Reservation, error) {
	if s, ok := p.index[key]; ok {
		if p.slots[s].state == slotPending {
			return Reservation{}, ErrBusy
		}
		return Reservation{}, ErrExists
	}
	var r Reservation
	if n := len(p.free); n > 0 {
		r.Slot = p.free[n-1]
		p.free = p.free[:n-1]
	} else {
		v := p.victim()
		if v < 0 {
			return Reservation{}, ErrFull
		}
		r.Slot, r.Evicted, r.HasEvicted = v, p.slots[v].key, true
		p.policy.Remove(v)
		delete(p.index, p.slots[v].key)
		p.evictions++
	}
	p.slots[r.Slot] = slot{key: key, state: slotPending}
	p.index[key] = r.Slot
	p.pending++
	return r, nil
}

func (p *Pool) victim() int {
	for s := p.policy.First(); s >= 0; s = p.policy.Next(s) {
		if p.slots[s].pins == 0 {
			return s
		}
	}
	return -1
}

// Commit makes a reserved slot's block readable. sum is its xxh3 checksum
// when sumKnown. With pin set the block starts with one pin, which the
// caller later drops with Unpin (a no_evict deposit).
func (p *Pool) Commit(slotID int, sum uint64, sumKnown, pin bool) {
	s := &p.slots[slotID]
	if s.state != slotPending {
		panic("runner: commit of a slot that is not reserved")
	}
	p.pending--
	s.state, s.sum, s.sumKnown = slotCommitted, sum, sumKnown
	if pin {
		s.pins = 1
		p.pinnedCommitted++
	}
	p.policy.Insert(slotID)
}

// Abort returns a reserved slot to the free list; its key reads Absent.
func (p *Pool) Abort(slotID int) {
	s := &p.slots[slotID]
	if s.state != slotPending {
		panic("runner: abort of a slot that is not reserved")
	}
	p.pending--
	delete(p.index, s.key)
	p.release(slotID)
}

func (p *Pool) release(slotID int) {
	p.slots[slotID] = slot{}
	p.free = append(p.free, slotID)
}

// Lookup reports what the pool holds for key and counts a hit or a miss.
func (p *Pool) Lookup(key uint64) Lookup {
	l := p.Peek(key)
	if l == Present {
		p.hits++
	} else {
		p.misses++
	}
	return l
}

// Peek is Lookup without counting.
func (p *Pool) Peek(key uint64) Lookup {
	s, ok := p.index[key]
	switch {
	case !ok:
		return Absent
	case p.slots[s].state == slotPending:
		return Pending
	}
	return Present
}

// Pin claims key's committed block: it is neither evicted nor reused until
// Unpin. Pinning counts as a use for the policy.
func (p *Pool) Pin(key uint64) (slotID int, ok bool) {
	s, ok := p.index[key]
	if !ok || p.slots[s].state != slotCommitted {
		return -1, false
	}
	if p.slots[s].pins == 0 {
		p.pinnedCommitted++
	}
	p.slots[s].pins++
	p.policy.Touch(s)
	return s, true
}

// Unpin drops one pin taken by Pin or a pinned Commit.
func (p *Pool) Unpin(slotID int) {
	s := &p.slots[slotID]
	if s.pins <= 0 || (s.state != slotCommitted && s.state != slotDoomed) {
		panic("runner: unpin of a slot that is not pinned")
	}
	s.pins--
	if s.pins > 0 {
		return
	}
	if s.state == slotDoomed {
		p.doomed--
		p.release(slotID)
		return
	}
	p.pinnedCommitted--
}

// Sum returns a committed slot's checksum if known.
func (p *Pool) Sum(slotID int) (uint64, bool) {
	return p.slots[slotID].sum, p.slots[slotID].sumKnown
}

// SetSum caches a checksum computed by a reader holding a pin.
func (p *Pool) SetSum(slotID int, sum uint64) {
	p.slots[slotID].sum, p.slots[slotID].sumKnown = sum, true
}

// Remove drops key's committed block. A pinned block leaves the index at once
// (no new reader finds it) but its slot is reused only after the last Unpin.
// A key being written is not removed.
func (p *Pool) Remove(key uint64) bool {
	s, ok := p.index[key]
	if !ok || p.slots[s].state != slotCommitted {
		return false
	}
	p.removeSlot(s)
	return true
}

func (p *Pool) removeSlot(s int) {
	p.removals++
	p.policy.Remove(s)
	delete(p.index, p.slots[s].key)
	if p.slots[s].pins > 0 {
		p.slots[s].state = slotDoomed
		p.pinnedCommitted--
		p.doomed++
		return
	}
	p.release(s)
}

// RemoveAll drops every committed block and appends their keys to dst.
func (p *Pool) RemoveAll(dst []uint64) []uint64 {
	for s := range p.slots {
		if p.slots[s].state == slotCommitted {
			dst = append(dst, p.slots[s].key)
			p.removeSlot(s)
		}
	}
	return dst
}

// Low reports whether free plus evictable slots are below the watermark:
// the owner should make room (spill, or refuse work) before deposits fail.
func (p *Pool) Low() bool {
	return p.watermark > 0 && len(p.slots)-p.pending-p.pinnedCommitted-p.doomed < p.watermark
}

// Stats returns the pool's counters.
func (p *Pool) Stats() PoolStats {
	pinned := p.pending + p.pinnedCommitted + p.doomed
	return PoolStats{
		Slots:     len(p.slots),
		Used:      len(p.index) - p.pending,
		Free:      len(p.free),
		Pinned:    pinned,
		Pending:   p.pending,
		Hits:      p.hits,
		Misses:    p.misses,
		Evictions: p.evictions,
		Removals:  p.removals,
		Low:       p.Low(),
	}
}
