// This file holds the listing of a runner's blocks, for checks of what routers believe against what runners hold.
package runner

// Keys appends the key of every committed (readable) block to dst, in slot
// order.
func (p *Pool) Keys(dst []uint64) []uint64 {
	for s := range p.slots {
		if p.slots[s].state == slotCommitted {
			dst = append(dst, p.slots[s].key)
		}
	}
	return dst
}

// Keys lists the blocks the runner holds and can serve now, in no
// particular order. Blocks being written are not listed.
func (r *Runner) Keys() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pool.Keys(nil)
}
