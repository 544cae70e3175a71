// This file holds a peer's send queue.

package zmtp

import "sync"

// outMsg is one thing to write to a peer: a message's frames, or bytes
// already framed (commands, 3.0 subscription messages).
type outMsg struct {
	frames [][]byte
	raw    []byte
}

// queue is a peer's send queue. It holds at most hwm messages, and grows
// only as messages are queued: a high limit costs nothing until used.
// Control items (raw) have a small limit of their own.
type queue struct {
	mu    sync.Mutex
	items []outMsg
	msgs  int
	ctrl  int
	ready chan struct{} // something to write
	space chan struct{} // room was made
}

// maxCtrl bounds pending control items: a peer that floods PINGs without
// reading its PONGs loses PONGs, not memory.
const maxCtrl = 64

func newQueue() *queue {
	return &queue{ready: make(chan struct{}, 1), space: make(chan struct{}, 1)}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// push queues a message unless hwm are waiting.
func (q *queue) push(frames [][]byte, hwm int) bool {
	q.mu.Lock()
	if q.msgs >= hwm {
		q.mu.Unlock()
		return false
	}
	q.items = append(q.items, outMsg{frames: frames})
	q.msgs++
	room := q.msgs < hwm
	q.mu.Unlock()
	signal(q.ready)
	if room {
		// Pass the turn on to another waiting sender.
		signal(q.space)
	}
	return true
}

// pushRaw queues framed bytes; a peer-triggered one (limited) is dropped
// when maxCtrl are waiting. Our own subscriptions are never dropped.
func (q *queue) pushRaw(raw []byte, limited bool) bool {
	q.mu.Lock()
	if limited && q.ctrl >= maxCtrl {
		q.mu.Unlock()
		return false
	}
	q.items = append(q.items, outMsg{raw: raw})
	q.ctrl++
	q.mu.Unlock()
	signal(q.ready)
	return true
}

// take returns everything queued and gives the queue dst's storage.
func (q *queue) take(dst []outMsg) []outMsg {
	q.mu.Lock()
	items := q.items
	q.items = dst[:0]
	q.msgs, q.ctrl = 0, 0
	q.mu.Unlock()
	signal(q.space)
	return items
}
