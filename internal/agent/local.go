// This file holds the agent's local state: its index and which sources are attached and ready.

package agent

import (
	"sync"

	"kvrouter/internal/index"
	"kvrouter/internal/relay"
)

// Plane commits a change of the agent's local state together with the
// message that tells consumers about it, atomically with respect to
// snapshots: a snapshot sees both or neither. *relay.Publisher is the real
// one.
type Plane interface {
	Commit(src index.Source, kind relay.Kind, ops []index.Op, change func() error) error
}

var _ Plane = (*relay.Publisher)(nil)

// local is the agent's source of truth for snapshots: the inventory index
// and, per source, whether consumers currently mirror it (attached) and
// whether it is ready.
//
// A source is attached while its rank's stream is in order. Every change to
// an attached source goes through a Plane commit, so a consumer that
// applied the stream up to a cursor holds exactly the local state at that
// cursor. A detached source was announced with KindReset (consumers dropped
// it and hold it not ready); the agent keeps changing it locally without
// publishing, and snapshots present it empty and not ready, which is what
// every consumer holds. Attaching publishes its full dump and then
// KindReady, after which consumers mirror it again.
type local struct {
	ix *index.Index

	mu       sync.Mutex // guards the maps; taken inside commits and by snapshots
	sources  []index.Source
	attached map[index.Source]bool
	ready    map[index.Source]bool
	gone     map[index.Source]bool // announced gone at Stop
}

func newLocal(ix *index.Index, sources []index.Source) *local {
	return &local{ix: ix, sources: sources, attached: map[index.Source]bool{}, ready: map[index.Source]bool{}, gone: map[index.Source]bool{}}
}

func (l *local) isAttached(src index.Source) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.attached[src]
}

func (l *local) set(src index.Source, attached, ready bool) {
	l.mu.Lock()
	l.attached[src], l.ready[src] = attached, ready
	l.mu.Unlock()
}

// states is the snapshot: the caller (the plane) holds its stream lock.
func (l *local) states() []relay.State {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]relay.State, 0, len(l.sources))
	for _, s := range l.sources {
		if l.gone[s] {
			continue
		}
		st := relay.State{Source: s, Ready: l.ready[s]}
		if l.attached[s] {
			st.Ops = l.ix.Dump(s)
		}
		out = append(out, st)
	}
	return out
}

// readiness returns each source's readiness, for metrics and health.
func (l *local) readiness() map[index.Source]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[index.Source]bool, len(l.sources))
	for _, s := range l.sources {
		out[s] = l.ready[s] && !l.gone[s]
	}
	return out
}
