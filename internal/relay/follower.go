package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"kvrouter/internal/index"
)

// Sink receives one agent's stream, in order, as the router's index sees it.
type Sink interface {
	// Reset drops everything src holds and marks it not ready.
	Reset(src index.Source)
	// Apply applies ops of src. An error means the sink fell out of step
	// with the agent; the follower resyncs.
	Apply(src index.Source, ops []index.Op) error
	// SetReady marks src usable (or not) as a hint source.
	SetReady(src index.Source, ready bool)
	// Gone forgets src.
	Gone(src index.Source)
}

// ErrSnapshot is returned when a snapshot could not be obtained.
var ErrSnapshot = errors.New("relay: snapshot failed")

// Follower keeps a Sink in step with one agent: it takes a snapshot, then
// applies live messages strictly in cursor order, and resyncs from a new
// snapshot whenever it sees a gap, a new epoch, or a rejected op. While it
// is not in step every source it knows is marked not ready, so no hint
// names a source the router is unsure of.
type Follower struct {
	NC     *nats.Conn
	Prefix string
	Sink   Sink
	Log    *slog.Logger
	// SnapshotTimeout bounds one snapshot exchange (default 5s).
	SnapshotTimeout time.Duration
	// Resynced, if set, is called after each successful snapshot, with the
	// reason it was taken; for metrics.
	Resynced func(reason string)

	epoch   uint64
	cursor  uint64
	synced  bool
	sources map[index.Source]bool
}

// Run follows until ctx ends. It returns ctx's error, or an error when the
// NATS subscription cannot be made.
func (f *Follower) Run(ctx context.Context) error {
	if f.Log == nil {
		f.Log = slog.Default()
	}
	if f.SnapshotTimeout <= 0 {
		f.SnapshotTimeout = 5 * time.Second
	}
	f.sources = map[index.Source]bool{}
	live := make(chan *nats.Msg, 4096)
	sub, err := f.NC.ChanSubscribe(AllSources(f.Prefix), live)
	if err != nil {
		return fmt.Errorf("relay: subscribe %s: %w", AllSources(f.Prefix), err)
	}
	defer sub.Unsubscribe()
	// Unlimited pending: dropping a live message would only force a resync,
	// but a bounded channel already applies back-pressure.
	sub.SetPendingLimits(-1, -1)

	reason := "start"
	backoff := 100 * time.Millisecond
	for {
		if !f.synced {
			if err := f.resync(ctx, live, reason); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				f.Log.Warn("relay: resync failed; retrying", "prefix", f.Prefix, "err", err, "in", backoff)
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, 5*time.Second)
				continue
			}
			backoff = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case nm := <-live:
			if r := f.live(nm.Data); r != "" {
				reason = r
				f.unsync()
			}
		}
	}
}

// live applies one live message; it returns a resync reason when the
// stream is out of step.
func (f *Follower) live(data []byte) string {
	m, err := Decode(data)
	if err != nil {
		f.Log.Warn("relay: dropping malformed message", "prefix", f.Prefix, "err", err)
		return "malformed"
	}
	switch {
	case m.Epoch != f.epoch:
		return "epoch"
	case m.Cursor <= f.cursor:
		return "" // already in the snapshot
	case m.Cursor != f.cursor+1:
		return "gap"
	}
	f.cursor = m.Cursor
	if err := f.apply(m); err != nil {
		f.Log.Warn("relay: op rejected; resyncing", "prefix", f.Prefix, "source", m.Source, "err", err)
		return "rejected"
	}
	return ""
}

func (f *Follower) apply(m Message) error {
	switch m.Kind {
	case KindOps:
		f.sources[m.Source] = f.sources[m.Source] // known, readiness unchanged
		return f.Sink.Apply(m.Source, m.Ops)
	case KindReset:
		f.sources[m.Source] = false
		f.Sink.Reset(m.Source)
	case KindReady:
		f.sources[m.Source] = true
		f.Sink.SetReady(m.Source, true)
	case KindGone:
		delete(f.sources, m.Source)
		f.Sink.Gone(m.Source)
	}
	return nil
}

func (f *Follower) unsync() {
	f.synced = false
	for s := range f.sources {
		f.Sink.SetReady(s, false)
	}
}

// resync takes a snapshot and replaces the sink's view of every source with
// it; live messages that arrive meanwhile wait in the subscription channel
// and are applied afterwards if they are newer.
func (f *Follower) resync(ctx context.Context, live chan *nats.Msg, reason string) error {
	inbox := f.NC.NewRespInbox()
	replies := make(chan *nats.Msg, 1024)
	sub, err := f.NC.ChanSubscribe(inbox, replies)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrSnapshot, err)
	}
	defer sub.Unsubscribe()
	sub.SetPendingLimits(-1, -1)
	if err := f.NC.PublishRequest(SnapshotSubject(f.Prefix), inbox, nil); err != nil {
		return fmt.Errorf("%w: request: %v", ErrSnapshot, err)
	}
	timer := time.NewTimer(f.SnapshotTimeout)
	defer timer.Stop()
	var frames []Message
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			return fmt.Errorf("%w: no complete answer from the agent on %s within %v", ErrSnapshot, SnapshotSubject(f.Prefix), f.SnapshotTimeout)
		case nm := <-replies:
			m, err := Decode(nm.Data)
			if err != nil {
				return fmt.Errorf("%w: %v", ErrSnapshot, err)
			}
			if m.Frame != len(frames) || (len(frames) > 0 && (m.Epoch != frames[0].Epoch || m.Cursor != frames[0].Cursor)) {
				return fmt.Errorf("%w: frame %d out of order (want %d)", ErrSnapshot, m.Frame, len(frames))
			}
			frames = append(frames, m)
			if m.Kind == KindEnd {
				return f.install(frames, reason)
			}
		}
	}
}

func (f *Follower) install(frames []Message, reason string) error {
	end := frames[len(frames)-1]
	seen := map[index.Source]bool{}
	for _, m := range frames[:len(frames)-1] {
		seen[m.Source] = true
	}
	for s := range f.sources {
		if !seen[s] {
			delete(f.sources, s)
			f.Sink.Gone(s)
		}
	}
	f.epoch, f.cursor = end.Epoch, end.Cursor
	for _, m := range frames[:len(frames)-1] {
		if err := f.apply(m); err != nil {
			return fmt.Errorf("%w: applying snapshot of %s: %v", ErrSnapshot, m.Source, err)
		}
	}
	f.synced = true
	if f.Resynced != nil {
		f.Resynced(reason)
	}
	f.Log.Debug("relay: in step", "prefix", f.Prefix, "epoch", f.epoch, "cursor", f.cursor, "reason", reason)
	return nil
}
