// This file holds the eviction policies of a pool's slots: LRU and FIFO.

package runner

// Policy orders a pool's committed slots for eviction. The pool tells it when
// a slot starts and stops holding a block and when a block is used, and walks
// its order (First, then Next) to find the first slot it may evict; pinned
// slots are skipped by the pool, not the policy, so a policy stays a plain
// ordering with no knowledge of claims.
//
// Slots are numbered 0..n-1. A policy is not safe for concurrent use: the
// pool is its only caller.
type Policy interface {
	// Insert records that slot now holds a block.
	Insert(slot int)
	// Touch records that slot's block was used.
	Touch(slot int)
	// Remove records that slot no longer holds a block.
	Remove(slot int)
	// First returns the slot to evict first, or -1 when none holds a block.
	First() int
	// Next returns the slot to evict after slot, or -1.
	Next(slot int) int
}

// NewLRU returns a policy that evicts the least recently used block first.
// It is the default.
func NewLRU(slots int) Policy { return &lru{list: newSlotList(slots)} }

// NewFIFO returns a policy that evicts the oldest stored block first,
// whatever its use since.
func NewFIFO(slots int) Policy { return &fifo{list: newSlotList(slots)} }

type lru struct{ list slotList }

var _ Policy = (*lru)(nil)

func (p *lru) Insert(slot int) { p.list.pushBack(slot) }
func (p *lru) Touch(slot int) {
	p.list.remove(slot)
	p.list.pushBack(slot)
}
func (p *lru) Remove(slot int)   { p.list.remove(slot) }
func (p *lru) First() int        { return p.list.head }
func (p *lru) Next(slot int) int { return p.list.next[slot] }

type fifo struct{ list slotList }

var _ Policy = (*fifo)(nil)

func (p *fifo) Insert(slot int)   { p.list.pushBack(slot) }
func (p *fifo) Touch(int)         {}
func (p *fifo) Remove(slot int)   { p.list.remove(slot) }
func (p *fifo) First() int        { return p.list.head }
func (p *fifo) Next(slot int) int { return p.list.next[slot] }

// slotList is an intrusive doubly linked list over slot numbers, kept in two
// arrays so that reordering never allocates.
type slotList struct {
	prev, next []int
	in         []bool
	head, tail int
}

func newSlotList(n int) slotList {
	return slotList{prev: make([]int, n), next: make([]int, n), in: make([]bool, n), head: -1, tail: -1}
}

func (l *slotList) pushBack(s int) {
	if l.in[s] {
		return
	}
	l.in[s] = true
	l.prev[s], l.next[s] = l.tail, -1
	if l.tail >= 0 {
		l.next[l.tail] = s
	} else {
		l.head = s
	}
	l.tail = s
}

func (l *slotList) remove(s int) {
	if !l.in[s] {
		return
	}
	l.in[s] = false
	p, n := l.prev[s], l.next[s]
	if p >= 0 {
		l.next[p] = n
	} else {
		l.head = n
	}
	if n >= 0 {
		l.prev[n] = p
	} else {
		l.tail = p
	}
	l.prev[s], l.next[s] = -1, -1
}
