package relay

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"

	"github.com/nats-io/nats.go"

	"kvrouter/internal/index"
)

// State is what an agent knows about one of its sources, for a snapshot.
type State struct {
	Source index.Source
	Ready  bool
	Ops    []index.Op // index.Dump of the source
}

// Publisher is an agent's side of the event plane.
type Publisher struct {
	nc     *nats.Conn
	prefix string
	epoch  uint64
	log    *slog.Logger

	// mu makes "change the local state, then publish" one step with respect
	// to snapshots: a snapshot sees either both or neither.
	mu     sync.Mutex
	cursor uint64
	sub    *nats.Subscription
}

// NewPublisher starts an agent stream under prefix with a fresh epoch.
func NewPublisher(nc *nats.Conn, prefix string, log *slog.Logger) *Publisher {
	if log == nil {
		log = slog.Default()
	}
	// The epoch only has to differ from the previous incarnation's.
	return &Publisher{nc: nc, prefix: prefix, epoch: rand.Uint64() | 1, log: log}
}

// Epoch returns the stream's epoch.
func (p *Publisher) Epoch() uint64 { return p.epoch }

// Commit runs change (which updates the agent's local state and may decline
// by returning an error) and, if it succeeded, publishes the message, both
// under the stream lock. A message that cannot be published after the
// local state changed leaves consumers behind; they notice the gap from the
// next cursor and resync from a snapshot.
func (p *Publisher) Commit(src index.Source, kind Kind, ops []index.Op, change func() error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if change != nil {
		if err := change(); err != nil {
			return err
		}
	}
	p.cursor++
	b, err := Encode(Message{Epoch: p.epoch, Cursor: p.cursor, Source: src, Kind: kind, Ops: ops})
	if err != nil {
		return fmt.Errorf("relay: encode: %w", err)
	}
	if err := p.nc.Publish(SourceSubject(p.prefix, src), b); err != nil {
		return fmt.Errorf("relay: publish on %s: %w", SourceSubject(p.prefix, src), err)
	}
	return nil
}

// ServeSnapshots answers snapshot requests with the states state returns,
// taken under the stream lock so they match the cursor sent with them.
func (p *Publisher) ServeSnapshots(state func() []State) error {
	sub, err := p.nc.Subscribe(SnapshotSubject(p.prefix), func(m *nats.Msg) {
		if m.Reply == "" {
			return
		}
		p.mu.Lock()
		states, cursor := state(), p.cursor
		p.mu.Unlock()
		if err := p.sendSnapshot(m.Reply, cursor, states); err != nil {
			p.log.Warn("relay: snapshot reply failed", "prefix", p.prefix, "err", err)
		}
	})
	if err != nil {
		return fmt.Errorf("relay: serve snapshots on %s: %w", SnapshotSubject(p.prefix), err)
	}
	p.sub = sub
	return nil
}

func (p *Publisher) sendSnapshot(reply string, cursor uint64, states []State) error {
	frame := 0
	send := func(m Message) error {
		m.Epoch, m.Cursor, m.Frame = p.epoch, cursor, frame
		frame++
		b, err := Encode(m)
		if err != nil {
			return err
		}
		return p.nc.Publish(reply, b)
	}
	var errs []error
	for _, st := range states {
		errs = append(errs, send(Message{Source: st.Source, Kind: KindReset}))
		for i := 0; i < len(st.Ops); i += MaxChunkOps {
			errs = append(errs, send(Message{Source: st.Source, Kind: KindOps, Ops: st.Ops[i:min(i+MaxChunkOps, len(st.Ops))]}))
		}
		if st.Ready {
			errs = append(errs, send(Message{Source: st.Source, Kind: KindReady}))
		}
	}
	errs = append(errs, send(Message{Kind: KindEnd}))
	return errors.Join(errs...)
}

// Close stops answering snapshots.
func (p *Publisher) Close() {
	if p.sub != nil {
		p.sub.Unsubscribe()
	}
}
