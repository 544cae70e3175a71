// This file holds Follower, a router's side: snapshot, then live messages, resync on a break.

package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
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
// snapshot whenever it sees a gap (a cursor skipped, or a heartbeat naming
// a cursor it never got), a new epoch, a rejected op, or live messages it
// had to drop. While it is not in step, or the agent has missed several
// heartbeats, every source it knows is marked not ready, so no hint names a
// source the router is unsure of.
type Follower struct {
	NC     *nats.Conn
	Prefix string
	Sink   Sink
	Log    *slog.Logger
	// SnapshotTimeout bounds one snapshot exchange (default 5s).
	SnapshotTimeout time.Duration
	// MaxBacklog bounds the bytes of live messages held while the sink is
	// busy or a snapshot is under way (default DefaultMaxBacklog). Beyond
	// it they are dropped and the follower resyncs.
	MaxBacklog int
	// Resynced, if set, is called after each successful snapshot, with the
	// reason it was taken; for metrics.
	Resynced func(reason string)
	// Heartbeat is how often the agent announces its cursor (default
	// DefaultHeartbeat). When MissedHeartbeats of them (default 3) pass
	// without a word from it, its sources are marked not ready until it
	// speaks again: an agent that died stops naming hint sources long
	// before its registration's lease runs out.
	Heartbeat        time.Duration
	MissedHeartbeats int
	// Silent, if set, is called when the agent falls silent (true) and
	// when it speaks again (false); for metrics.
	Silent func(silent bool)
	// Now is the clock silence is measured on (default time.Now).
	Now func() time.Time

	epoch   uint64
	cursor  uint64
	synced  bool
	sources map[index.Source]bool // the agent's word on each source's readiness
	silence silence
	ticks   <-chan time.Time // tests inject it; else a ticker at Heartbeat/2
}

// DefaultMaxBacklog is Follower.MaxBacklog's default.
const DefaultMaxBacklog = 64 << 20

// Run follows until ctx ends. It returns ctx's error, or an error when the
// NATS subscription cannot be made.
func (f *Follower) Run(ctx context.Context) error {
	if f.Log == nil {
		f.Log = slog.Default()
	}
	if f.SnapshotTimeout <= 0 {
		f.SnapshotTimeout = 5 * time.Second
	}
	if f.MaxBacklog <= 0 {
		f.MaxBacklog = DefaultMaxBacklog
	}
	if f.Heartbeat <= 0 {
		f.Heartbeat = DefaultHeartbeat
	}
	if f.MissedHeartbeats <= 0 {
		f.MissedHeartbeats = 3
	}
	if f.Now == nil {
		f.Now = time.Now
	}
	if f.ticks == nil {
		t := time.NewTicker(f.Heartbeat / 2)
		defer t.Stop()
		f.ticks = t.C
	}
	f.silence = silence{limit: time.Duration(f.MissedHeartbeats) * f.Heartbeat}
	f.sources = map[index.Source]bool{}
	// One subscription for the sources and the heartbeat keeps the two in
	// the agent's order; the agent's other subjects are not the stream.
	sources, heartbeat := f.Prefix+"."+subjectSources+".", CursorSubject(f.Prefix)
	live := newBacklog(f.MaxBacklog)
	sub, err := f.subscribe(f.Prefix+".>", live, func(subject string) bool {
		return subject == heartbeat || strings.HasPrefix(subject, sources)
	})
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()

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
		case <-f.ticks:
			if f.silence.check(f.Now()) {
				f.Log.Warn("relay: agent silent; its sources give no hints until it speaks again", "prefix", f.Prefix,
					"missed_heartbeats", f.MissedHeartbeats, "heartbeat", f.Heartbeat)
				for s := range f.sources {
					f.Sink.SetReady(s, false)
				}
				if f.Silent != nil {
					f.Silent(true)
				}
			}
			continue
		case <-live.ready:
		}
		msgs, overflowed := live.take()
		if len(msgs) > 0 || overflowed {
			f.heard()
		}
		if overflowed {
			f.Log.Warn("relay: live messages dropped while the router was busy; resyncing", "prefix", f.Prefix, "max_backlog", f.MaxBacklog)
			reason = "overflow"
			f.unsync()
			continue
		}
		for _, data := range msgs {
			if r := f.live(data); r != "" {
				reason = r
				f.unsync()
				break
			}
		}
	}
}

// subscribe delivers the messages of subject that keep admits to b. The
// callback never blocks, so the client's own queue stays short; its limits
// are lifted so that it never drops a message behind the backlog's back.
func (f *Follower) subscribe(subject string, b *backlog, keep func(subject string) bool) (*nats.Subscription, error) {
	sub, err := f.NC.Subscribe(subject, func(m *nats.Msg) {
		if keep == nil || keep(m.Subject) {
			b.push(m.Data)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("relay: subscribe %s: %w", subject, err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		sub.Unsubscribe()
		return nil, fmt.Errorf("relay: lift the pending limits of %s: %w", subject, err)
	}
	return sub, nil
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
	case m.Kind == KindEnd:
		if m.Cursor > f.cursor {
			return "gap" // the heartbeat names messages that never came
		}
		return ""
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

// IsSilent reports whether the agent is silent now; call it only after Run
// returned.
func (f *Follower) IsSilent() bool { return f.silence.quiet }

// heard notes a sign of life from the agent: sources it said were ready
// are again, if silence had withdrawn them.
func (f *Follower) heard() {
	if !f.silence.heard(f.Now()) {
		return
	}
	f.Log.Info("relay: agent speaks again", "prefix", f.Prefix)
	if f.synced {
		for s, ready := range f.sources {
			if ready {
				f.Sink.SetReady(s, true)
			}
		}
	}
	if f.Silent != nil {
		f.Silent(false)
	}
}

func (f *Follower) unsync() {
	f.synced = false
	for s := range f.sources {
		f.Sink.SetReady(s, false)
	}
}

// resync takes a snapshot and replaces the sink's view of every source with
// it. Live messages that arrived before the request are all covered by the
// snapshot (the agent sent them before it answered), so they are dropped,
// with any overflow they caused; those that arrive meanwhile wait in the
// backlog and are applied afterwards if they are newer.
func (f *Follower) resync(ctx context.Context, live *backlog, reason string) error {
	inbox := f.NC.NewRespInbox()
	// A snapshot is held whole before it is installed, so bounding its
	// frames in flight would save nothing.
	replies := newBacklog(0)
	sub, err := f.subscribe(inbox, replies, nil)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrSnapshot, err)
	}
	defer sub.Unsubscribe()
	live.take()
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
		case <-replies.ready:
		}
		msgs, _ := replies.take()
		for _, data := range msgs {
			m, err := Decode(data)
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
	// The snapshot is the agent speaking, and it set each source's
	// readiness afresh.
	f.silence.heard(f.Now())
	if f.Resynced != nil {
		f.Resynced(reason)
	}
	f.Log.Debug("relay: in step", "prefix", f.Prefix, "epoch", f.epoch, "cursor", f.cursor, "reason", reason)
	return nil
}

// silence tells when an agent has said nothing, neither a message nor a
// heartbeat, for longer than limit. Pure: time comes in with every call.
type silence struct {
	limit time.Duration
	last  time.Time
	quiet bool
}

// heard records a sign of life at now; it reports whether the agent had
// been silent.
func (s *silence) heard(now time.Time) (resumed bool) {
	s.last = now
	resumed, s.quiet = s.quiet, false
	return resumed
}

// check reports whether the agent fell silent by now: true once, when the
// limit passes without a word since the last one heard.
func (s *silence) check(now time.Time) (fell bool) {
	if s.quiet || s.last.IsZero() || now.Sub(s.last) <= s.limit {
		return false
	}
	s.quiet = true
	return true
}

// backlog holds the messages a subscription delivered that the follower
// has not taken yet. It is bounded in bytes (0: unbounded); a message that
// does not fit drops the whole backlog and marks it overflowed until the
// next take, since the follower resyncs and needs none of it.
type backlog struct {
	max   int
	ready chan struct{} // signalled when there is something to take

	mu         sync.Mutex
	msgs       [][]byte
	size       int
	overflowed bool
}

func newBacklog(max int) *backlog {
	return &backlog{max: max, ready: make(chan struct{}, 1)}
}

func (b *backlog) push(data []byte) {
	b.mu.Lock()
	switch {
	case b.overflowed:
	case b.max > 0 && b.size+len(data) > b.max:
		b.msgs, b.size, b.overflowed = nil, 0, true
	default:
		b.msgs = append(b.msgs, data)
		b.size += len(data)
	}
	b.mu.Unlock()
	select {
	case b.ready <- struct{}{}:
	default:
	}
}

// take empties the backlog: its messages in arrival order, or none and
// true when some were dropped since the last take.
func (b *backlog) take() ([][]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	msgs, overflowed := b.msgs, b.overflowed
	b.msgs, b.size, b.overflowed = nil, 0, false
	return msgs, overflowed
}
