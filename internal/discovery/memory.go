// This file holds the in-process Registry, for the single-binary default and tests.

package discovery

import (
	"context"
	"sync"
	"time"
)

// Memory is a Registry inside one process, for the single-binary default
// and tests. Leases expire when Sweep runs after their TTL has passed.
type Memory struct {
	ttl time.Duration
	now func() time.Time

	mu       sync.Mutex
	entries  map[string]memEntry
	watchers map[chan Change]struct{}
}

type memEntry struct {
	w       Worker
	expires time.Time
}

var _ Registry = (*Memory)(nil)

// NewMemory returns an empty registry whose leases last ttl on the clock now.
func NewMemory(ttl time.Duration, now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{ttl: ttl, now: now, entries: map[string]memEntry{}, watchers: map[chan Change]struct{}{}}
}

// Put implements Registry.
func (m *Memory) Put(_ context.Context, w Worker) error {
	if err := w.Validate(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.entries[w.ID] = memEntry{w: w, expires: m.now().Add(m.ttl)}
	m.broadcast(Change{Op: OpPut, ID: w.ID, Worker: w})
	return nil
}

// Delete implements Registry.
func (m *Memory) Delete(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.entries[id]; !ok {
		return ErrNotFound
	}
	delete(m.entries, id)
	m.broadcast(Change{Op: OpDelete, ID: id})
	return nil
}

// Sweep expires leases that ended before now.
func (m *Memory) Sweep() {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	for id, e := range m.entries {
		if !now.Before(e.expires) {
			delete(m.entries, id)
			m.broadcast(Change{Op: OpDelete, ID: id})
		}
	}
}

// Run sweeps every interval until ctx ends.
func (m *Memory) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.Sweep()
		}
	}
}

// Watch implements Registry.
func (m *Memory) Watch(ctx context.Context) (<-chan Change, error) {
	// Buffered so a slow watcher does not stall writers; one that falls a
	// whole buffer behind loses its watch (closed channel) rather than
	// silently missing changes.
	ch := make(chan Change, 1024)
	m.mu.Lock()
	for id, e := range m.entries {
		ch <- Change{Op: OpPut, ID: id, Worker: e.w}
		if len(ch) == cap(ch) {
			break
		}
	}
	ch <- Change{Op: OpSynced}
	m.watchers[ch] = struct{}{}
	m.mu.Unlock()
	go func() {
		<-ctx.Done()
		m.mu.Lock()
		if _, ok := m.watchers[ch]; ok {
			delete(m.watchers, ch)
			close(ch)
		}
		m.mu.Unlock()
	}()
	return ch, nil
}

func (m *Memory) broadcast(c Change) {
	for ch := range m.watchers {
		select {
		case ch <- c:
		default:
			delete(m.watchers, ch)
			close(ch)
		}
	}
}
