// This file holds Publisher, an agent's side: commits with their cursor, heartbeats, snapshots.

package relay

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"kvrouter/internal/index"
)

// DefaultHeartbeat is how often a Publisher announces its cursor unless
// told otherwise.
const DefaultHeartbeat = time.Second

// State is what an agent knows about one of its sources, for a snapshot.
type State struct {
	Source index.Source
	Ready  bool
	Ops    []index.Op // index.Dump of the source
}

// Publisher is an agent's side of the event plane.
type Publisher struct {
	// Heartbeat is how often ServeSnapshots' heartbeat announces the
	// stream's cursor (default DefaultHeartbeat); it bounds how long a
	// consumer that lost the last messages keeps a stale view. Set it
	// before ServeSnapshots.
	Heartbeat time.Duration

	nc     *nats.Conn
	prefix string
	epoch  uint64
	log    *slog.Logger

	// mu makes "change the local state, then publish" one step with respect
	// to snapshots: a snapshot sees either both or neither. It also keeps a
	// heartbeat from announcing a cursor whose message is not sent yet.
	mu     sync.Mutex
	cursor uint64
	sub    *nats.Subscription

	stop      chan struct{}
	beating   sync.WaitGroup
	closeOnce sync.Once
}

// NewPublisher starts an agent stream under prefix with a fresh epoch.
func NewPublisher(nc *nats.Conn, prefix string, log *slog.Logger) *Publisher {
	if log == nil {
		log = slog.Default()
	}
	// The epoch only has to differ from the previous incarnation's.
	return &Publisher{nc: nc, prefix: prefix, epoch: rand.Uint64() | 1, log: log, stop: make(chan struct{})}
}

// Epoch returns the stream's epoch.
func (p *Publisher) Epoch() uint64 { return p.epoch }

// Commit runs change (which updates the agent's local state and may decline
// by returning an error) and, if it succeeded, publishes the message, both
// under the stream lock. A message above the server's max_payload goes out
// as several, each with its own cursor. A message that cannot be published
// after the local state changed still takes its cursor, and the cursor is
// announced at once (and by every heartbeat), so consumers see that they
// miss it and resync from a snapshot.
func (p *Publisher) Commit(src index.Source, kind Kind, ops []index.Op, change func() error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if change != nil {
		if err := change(); err != nil {
			return err
		}
	}
	subject := SourceSubject(p.prefix, src)
	msgs, err := encodeWithin(Message{Epoch: p.epoch, Source: src, Kind: kind, Ops: ops}, p.maxPayload(),
		func(m *Message, i int) { m.Cursor = p.cursor + 1 + uint64(i) })
	if err != nil {
		p.cursor++
		p.announce()
		return fmt.Errorf("relay: publish on %s: %w", subject, err)
	}
	for _, b := range msgs {
		p.cursor++
		if err := p.nc.Publish(subject, b); err != nil {
			p.announce()
			return fmt.Errorf("relay: publish on %s (check the NATS connection): %w", subject, err)
		}
	}
	return nil
}

// maxPayload is the largest message the server accepts.
func (p *Publisher) maxPayload() int {
	if n := p.nc.MaxPayload(); n > 0 {
		return int(n)
	}
	return defaultMaxPayload
}

// announce publishes the cursor reached; the caller holds p.mu. A failure
// is left to the next heartbeat.
func (p *Publisher) announce() {
	b, err := Encode(Message{Epoch: p.epoch, Cursor: p.cursor, Kind: KindEnd})
	if err == nil {
		err = p.nc.Publish(CursorSubject(p.prefix), b)
	}
	if err != nil {
		p.log.Debug("relay: heartbeat not sent", "prefix", p.prefix, "cursor", p.cursor, "err", err)
	}
}

// ServeSnapshots answers snapshot requests with the states state returns,
// taken under the stream lock so they match the cursor sent with them, and
// starts the heartbeat.
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
	every := p.Heartbeat
	if every <= 0 {
		every = DefaultHeartbeat
	}
	p.beating.Add(1)
	go p.beat(every)
	return nil
}

func (p *Publisher) beat(every time.Duration) {
	defer p.beating.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.mu.Lock()
			p.announce()
			p.mu.Unlock()
		}
	}
}

// sendSnapshot frames states for reply. A frame that cannot be sent still
// takes its number, so the consumer sees the hole at the next frame rather
// than install a snapshot that misses it.
func (p *Publisher) sendSnapshot(reply string, cursor uint64, states []State) error {
	frame := 0
	limit := p.maxPayload()
	send := func(m Message) error {
		m.Epoch, m.Cursor = p.epoch, cursor
		msgs, err := encodeWithin(m, limit, func(m *Message, i int) { m.Frame = frame + i })
		if err != nil {
			frame++
			return err
		}
		frame += len(msgs)
		var errs []error
		for _, b := range msgs {
			errs = append(errs, p.nc.Publish(reply, b))
		}
		return errors.Join(errs...)
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

// Close stops answering snapshots and the heartbeat.
func (p *Publisher) Close() {
	p.closeOnce.Do(func() {
		close(p.stop)
		if p.sub != nil {
			p.sub.Unsubscribe()
		}
	})
	p.beating.Wait()
}
