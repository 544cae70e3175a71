// This file holds Claim: one block pinned for a reader until Release.

package runner

import (
	"fmt"
	"sync/atomic"
)

// Claim pins one block: its bytes stay valid and unchanged until Release.
type Claim struct {
	r        *Runner
	slot     int
	key      uint64
	released atomic.Bool
}

func (r *Runner) newClaim(slot int, key uint64) *Claim {
	return &Claim{r: r, slot: slot, key: key}
}

// Key returns the claimed block's key.
func (c *Claim) Key() uint64 { return c.key }

// Bytes returns the block. Do not use it after Release, and do not write it.
func (c *Claim) Bytes() []byte { return c.r.pool.Buffer(c.slot) }

// Release drops the pin; later calls do nothing.
func (c *Claim) Release() {
	if c.released.Swap(true) {
		return
	}
	c.r.mu.Lock()
	c.r.pool.Unpin(c.slot)
	c.r.unlockQuiet()
}

// Read claims key's block, or returns ErrNotFound.
func (r *Runner) Read(key uint64) (*Claim, error) {
	r.mu.Lock()
	slot, ok := r.pool.Pin(key)
	r.unlockQuiet()
	if !ok {
		return nil, fmt.Errorf("read %#x: %w", key, ErrNotFound)
	}
	return r.newClaim(slot, key), nil
}

// acquire pins key's block for a peer server without allocating a Claim.
func (r *Runner) acquire(key uint64) (slot int, sum uint64, sumKnown, ok bool) {
	r.mu.Lock()
	defer r.unlockQuiet() // pins can take the pool below its watermark
	slot, ok = r.pool.Pin(key)
	if !ok {
		return -1, 0, false, false
	}
	sum, sumKnown = r.pool.Sum(slot)
	return slot, sum, sumKnown, true
}

// releaseSlot drops acquire's pin, caching a checksum the server computed.
func (r *Runner) releaseSlot(slot int, sum uint64, computed bool) {
	r.mu.Lock()
	if computed {
		r.pool.SetSum(slot, sum)
	}
	r.pool.Unpin(slot)
	r.unlockQuiet()
}
