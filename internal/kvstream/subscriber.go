// This file holds Subscriber: the I/O shell around Tracker.

package kvstream

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"kvrouter/internal/zmtp"
)

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("kvstream: bad config")

// Key bounds (Config.MaxKeys, Config.KeyIdle).
const (
	// DefaultMaxKeys is far above the publishers one socket serves (a
	// fleet's engines times their DP ranks) and small enough that a
	// stranger inventing topics costs a few MiB at most.
	DefaultMaxKeys = 4096
	// DefaultKeyIdle: an engine serving traffic publishes far more often.
	DefaultKeyIdle = 10 * time.Minute
	// sweepEvery spaces the searches for idle keys and the warnings about
	// refused ones, so that a flood of new keys costs no more than the
	// map lookups of its messages.
	sweepEvery = time.Second
	// warnEvery spaces repeated warnings of one kind.
	warnEvery = 10 * time.Second
)

// Config configures a Subscriber.
type Config struct {
	// Endpoint is where the publisher is (connect mode: a dialable address,
	// see DialAddress) or where we listen (bind mode, publishers dial us).
	Endpoint string
	// Bind selects bind mode (the llm-d convention, topic
	// kv@<host>:<port>@<model>): several publishers connect to one socket
	// and are told apart by topic (PublisherKey: one key for an engine's
	// epochs and runner shard topics), unless OnePublisher.
	Bind bool
	// OnePublisher says that in bind mode exactly one publisher dials the
	// socket (the state agent's socket per engine rank). All its topics
	// share its one seq counter (with TP > 1 kvrouter's SGLang engines add
	// runner shard topics), so keying by topic would see each topic's
	// batches as the other's gaps and replay them out of order: the stream
	// is tracked under one key, Endpoint, as in connect mode. And since the
	// socket's connections are all that publisher's, one that ends and is
	// followed by another is reported Reconnected. Connect mode always has
	// one publisher.
	OnePublisher bool
	// Topic is the SUB prefix filter; "" takes every topic. A publisher
	// stamps one seq counter across all its topics, so filtering away some
	// of a connect-mode publisher's topics shows up as gaps.
	Topic string
	// ReplayEndpoint is the publisher's replay ROUTER, dialable; "" disables
	// gap recovery. Connect mode or OnePublisher only: otherwise in bind
	// mode use ReplayFor.
	ReplayEndpoint string
	// ReplayFor maps a key to its publisher's replay endpoint ("" for none).
	// It takes precedence over ReplayEndpoint.
	ReplayFor func(key string) string
	// ReplayTimeout bounds one replay exchange (default DefaultReplayTimeout).
	ReplayTimeout time.Duration
	// DialTimeout bounds one connect attempt (default DefaultDialTimeout).
	DialTimeout time.Duration
	// Backoff spaces re-dials in connect mode.
	Backoff Backoff
	// Limits bound what publishers (and strangers) can make the socket
	// and the replay connections hold.
	Limits
	// MaxHeld: see Tracker.MaxHeld.
	MaxHeld int
	// CatchUp replays a publisher's buffered history before its first
	// message (see Tracker.CatchUp); it needs a replay endpoint. In connect
	// mode and with OnePublisher the replay starts at the first connection,
	// without waiting for a message (Tracker.Start), and again from seq 0
	// at every later one (Tracker.Reconnect).
	CatchUp bool
	// Accept, if set, is asked about each message of a key not tracked yet
	// (in bind mode with several publishers, the topic's PublisherKey):
	// unless it says yes the message is dropped, counted in Unaccepted,
	// before any state is kept for the key. A consumer that knows its
	// publishers keeps strangers' topics from costing memory.
	Accept func(key string) bool
	// MaxKeys bounds the keys tracked at once (default DefaultMaxKeys). A
	// new key that finds them all taken makes the keys idle for KeyIdle
	// forgotten, each with an Unrecoverable (its batches from then on are
	// not checked against the ones before); if none is, the new key's
	// messages are dropped, counted in KeysRefused.
	MaxKeys int
	// KeyIdle: see MaxKeys (default DefaultKeyIdle).
	KeyIdle time.Duration
	// Now is the clock of KeyIdle and of log rate limits (default
	// time.Now).
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Stats are a Subscriber's counters since it was made.
type Stats struct {
	Received uint64 // well-formed live messages read
	// Malformed counts the live messages and replay replies dropped for
	// their shape: WrongFrameCount + BadSeqLength + BadDelimiter.
	Malformed       uint64
	WrongFrameCount uint64 // dropped: not 3 frames
	BadSeqLength    uint64 // dropped: seq frame not 8 bytes
	BadDelimiter    uint64 // replay replies dropped: delimiter frame not empty
	Gaps            uint64 // gaps opened
	Unrecoverable   uint64 // Unrecoverable signals
	Restarts        uint64
	Reconnects      uint64
	Replays         uint64 // replay requests sent
	ReplayFailures  uint64 // replays that ended without the end marker
	// Messages of keys not tracked, dropped: Accept said no, or MaxKeys
	// was reached and no key was idle.
	Unaccepted  uint64
	KeysRefused uint64
	// KeysForgotten counts keys forgotten for their idleness at MaxKeys.
	KeysForgotten uint64
	// Connections dropped by the ZMTP layer, live and replay together;
	// what they were sending is lost with them.
	Oversize          uint64 // a message over MaxMessageSize announced (or too many frames)
	ProtocolErrors    uint64 // malformed ZMTP after the handshake
	HandshakeFailures uint64 // bad greeting, mechanism, READY or socket type, or HandshakeTimeout passed
	PeersRefused      uint64 // incoming connections refused: MaxPeers reached
	HeartbeatTimeouts uint64 // silent peers dropped (Heartbeat)
}

// All yields every counter under its metric label name.
func (s Stats) All() iter.Seq2[string, uint64] {
	return func(yield func(string, uint64) bool) {
		for _, c := range []struct {
			k string
			v uint64
		}{
			{"received", s.Received}, {"malformed", s.Malformed}, {"wrong_frame_count", s.WrongFrameCount},
			{"bad_seq_length", s.BadSeqLength}, {"bad_delimiter", s.BadDelimiter}, {"gaps", s.Gaps},
			{"unrecoverable", s.Unrecoverable}, {"restarts", s.Restarts}, {"reconnects", s.Reconnects},
			{"replays", s.Replays}, {"replay_failures", s.ReplayFailures},
			{"unaccepted", s.Unaccepted}, {"keys_refused", s.KeysRefused}, {"keys_forgotten", s.KeysForgotten},
			{"oversize", s.Oversize},
			{"protocol_errors", s.ProtocolErrors}, {"handshake_failures", s.HandshakeFailures},
			{"peers_refused", s.PeersRefused}, {"heartbeat_timeouts", s.HeartbeatTimeouts},
		} {
			if !yield(c.k, c.v) {
				return
			}
		}
	}
}

// Subscriber reads one event stream (connect mode) or several (bind mode)
// and delivers an ordered stream of Items.
type Subscriber struct {
	cfg Config
	log *slog.Logger
	net zmtp.Counters // live socket and replay connections

	received, gaps, unrecoverable              atomic.Uint64
	frameCount, seqLength, delimiter           atomic.Uint64
	restarts, reconnects, replays, replayFails atomic.Uint64
	unaccepted, keysRefused, keysForgotten     atomic.Uint64
}

// NewSubscriber checks cfg and returns a Subscriber; Run starts it.
func NewSubscriber(cfg Config) (*Subscriber, error) {
	if cfg.Endpoint == "" {
		return nil, fmt.Errorf("%w: Endpoint is empty", ErrConfig)
	}
	if !cfg.Bind {
		if _, err := DialAddress(cfg.Endpoint, ""); err != nil {
			return nil, fmt.Errorf("%w: Endpoint in connect mode must be dialable: %w", ErrConfig, err)
		}
	}
	if cfg.Bind && !cfg.OnePublisher && cfg.ReplayEndpoint != "" && cfg.ReplayFor == nil {
		return nil, fmt.Errorf("%w: ReplayEndpoint: in bind mode several publishers share the socket; set ReplayFor to map each key to its replay endpoint", ErrConfig)
	}
	if cfg.ReplayEndpoint != "" {
		if _, err := DialAddress(cfg.ReplayEndpoint, ""); err != nil {
			return nil, fmt.Errorf("%w: ReplayEndpoint must be dialable: %w", ErrConfig, err)
		}
	}
	if cfg.ReplayTimeout <= 0 {
		cfg.ReplayTimeout = DefaultReplayTimeout
	}
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	if cfg.KeyIdle <= 0 {
		cfg.KeyIdle = DefaultKeyIdle
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Subscriber{cfg: cfg, log: log.With("endpoint", cfg.Endpoint)}, nil
}

// Stats returns the counters.
func (s *Subscriber) Stats() Stats {
	n := s.net.Snapshot()
	st := Stats{
		Received:          s.received.Load(),
		WrongFrameCount:   s.frameCount.Load(),
		BadSeqLength:      s.seqLength.Load(),
		BadDelimiter:      s.delimiter.Load(),
		Gaps:              s.gaps.Load(),
		Unrecoverable:     s.unrecoverable.Load(),
		Restarts:          s.restarts.Load(),
		Reconnects:        s.reconnects.Load(),
		Replays:           s.replays.Load(),
		ReplayFailures:    s.replayFails.Load(),
		Unaccepted:        s.unaccepted.Load(),
		KeysRefused:       s.keysRefused.Load(),
		KeysForgotten:     s.keysForgotten.Load(),
		Oversize:          n.Oversize,
		ProtocolErrors:    n.ProtocolErrors,
		HandshakeFailures: n.HandshakeFailures,
		PeersRefused:      n.Refused,
		HeartbeatTimeouts: n.HeartbeatTimeouts,
	}
	st.Malformed = st.WrongFrameCount + st.BadSeqLength + st.BadDelimiter
	return st
}

func (s *Subscriber) countDrops(d drops) {
	s.frameCount.Add(d.frameCount)
	s.seqLength.Add(d.seqLength)
	s.delimiter.Add(d.delimiter)
}

// Run subscribes and sends Items to out until ctx is done. It returns nil
// once ctx is done and every goroutine it started has exited, or an error
// if it cannot bind. It never closes out. Each Run starts with fresh
// sequence state; run one at a time.
//
// In connect mode the socket redials with Backoff whenever a dial fails or
// the connection ends; once a lost connection is back, Reconnected is sent
// before its first message. In bind mode with OnePublisher, Reconnected is
// sent when a connection is made after the one that delivered ended, or
// when another connection than that one delivers or outlives it. With
// CatchUp, the publisher's history from seq 0 is replayed right after
// Reconnected (Tracker.Reconnect). A publisher that
// vanishes without closing its TCP connection is noticed only with
// Heartbeat set.
func (s *Subscriber) Run(ctx context.Context, out chan<- Item) error {
	ctx, cancel := context.WithCancel(ctx)
	ss := &session{
		Subscriber: s,
		ctx:        ctx,
		out:        out,
		opts:       socketOptions(s.log, s.cfg.DialTimeout, s.cfg.Limits, s.cfg.Backoff, &s.net),
		tr:         Tracker{MaxHeld: s.cfg.MaxHeld, CatchUp: s.cfg.CatchUp},
		replayed:   make(chan replayDone),
		seen:       make(map[string]time.Time),
		warned:     make(map[string]bool),
	}
	defer ss.wg.Wait()
	defer cancel()

	live, err := ss.open()
	if err != nil {
		return err
	}
	defer live.Close()

	var (
		connected bool // connect mode: a connection existed, the next one is a reconnect
		// OnePublisher: the connection whose messages make the stream, and
		// one made after it while it had not ended yet.
		current, pending uint64
		ended            bool // OnePublisher: current ended
	)
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-live.C():
			switch m.Event {
			case zmtp.EventConnected:
				switch {
				case !s.cfg.Bind:
					if connected {
						ss.reconnected()
					} else {
						ss.catchUp()
					}
					connected = true
				case !s.cfg.OnePublisher:
				case current == 0:
					ss.catchUp()
					current = m.Peer
				case ended:
					// The publisher is back on a new connection, maybe a
					// new process whose seq already passed the last one
					// seen: its batches would pass for a gap or even for
					// the next ones, and a replay would hand the new
					// process's history to a consumer holding the old
					// one's state.
					ss.reconnected()
					current, ended = m.Peer, false
				default:
					// The current one may be half-open: whichever of the
					// two first ends or sends decides.
					pending = m.Peer
				}
			case zmtp.EventDisconnected:
				if !s.cfg.Bind {
					s.log.Info("kvstream: publisher connection lost, redialing", "err", m.Err)
					break
				}
				// One publisher's connection ended; the socket still
				// serves the others and the one that comes back.
				s.log.Debug("kvstream: publisher connection ended", "err", m.Err)
				switch {
				case !s.cfg.OnePublisher:
				case m.Peer == current && pending != 0:
					ss.reconnected()
					current, pending = pending, 0
				case m.Peer == current:
					ended = true
				case m.Peer == pending:
					pending = 0
				}
			case zmtp.EventMessage:
				if s.cfg.Bind && s.cfg.OnePublisher && current != 0 && m.Peer != current {
					// A message of another connection than the one that
					// delivered: the publisher is back on it.
					ss.reconnected()
					current, ended = m.Peer, false
					if pending == m.Peer {
						pending = 0
					}
				}
				ss.onLive(m.Frames)
			}
		case r := <-ss.replayed:
			ss.onReplay(r)
		}
	}
}

// session is the state of one Run, owned by Run's goroutine.
type session struct {
	*Subscriber
	ctx      context.Context
	out      chan<- Item
	opts     zmtp.Options
	tr       Tracker
	scratch  []Item
	replayed chan replayDone
	wg       sync.WaitGroup // replay fetches

	// seen is when each tracked key last delivered a live message.
	seen map[string]time.Time
	// warned holds the keys whose malformed replay replies were logged.
	warned    map[string]bool
	lastSweep time.Time
	// refusedLogged is when refused keys were last logged; refusedSince
	// counts those refused since.
	refusedLogged time.Time
	refusedSince  uint64
}

type replayDone struct {
	req      ReplayRequest
	msgs     []Message
	complete bool
	dropped  drops
	err      error
}

// reconnected reports the one publisher back on a new connection and
// starts its catch-up from seq 0 (Tracker.Reconnect).
func (ss *session) reconnected() {
	key := ss.cfg.Endpoint
	req := ss.tr.Reconnect(key, ss.replayEndpoint(key) != "")
	ss.reconnects.Add(1)
	ss.log.Info("kvstream: reconnected", "catch_up", req != nil)
	ss.emit([]Item{Reconnected{Endpoint: ss.cfg.Endpoint}})
	if req != nil {
		ss.startReplay(*req)
	}
}

// open makes the SUB socket: bound, or connecting in the background.
func (ss *session) open() (*zmtp.Socket, error) {
	opts := ss.opts
	opts.Events = true
	sock, err := zmtp.New(zmtp.Sub, opts)
	if err != nil {
		return nil, err
	}
	if err := sock.Subscribe(ss.cfg.Topic); err != nil {
		sock.Close()
		return nil, fmt.Errorf("kvstream: subscribe to topic %q: %w", ss.cfg.Topic, err)
	}
	if ss.cfg.Bind {
		err = sock.Listen(ss.cfg.Endpoint)
	} else {
		err = sock.Connect(ss.cfg.Endpoint)
	}
	if err != nil {
		sock.Close()
		return nil, fmt.Errorf("kvstream: Endpoint %s: %w", ss.cfg.Endpoint, err)
	}
	return sock, nil
}

func (ss *session) key(topic []byte) string {
	if ss.cfg.Bind && !ss.cfg.OnePublisher {
		return PublisherKey(string(topic))
	}
	return ss.cfg.Endpoint
}

func (ss *session) replayEndpoint(key string) string {
	if ss.cfg.ReplayFor != nil {
		return ss.cfg.ReplayFor(key)
	}
	return ss.cfg.ReplayEndpoint
}

// catchUp starts the one publisher's catch-up at its first connection.
func (ss *session) catchUp() {
	if ss.replayEndpoint(ss.cfg.Endpoint) == "" {
		return
	}
	if req := ss.tr.Start(ss.cfg.Endpoint); req != nil {
		ss.startReplay(*req)
	}
}

func (ss *session) onLive(frames [][]byte) {
	topic, seq, payload, err := ParseMessage(frames)
	if err != nil {
		var d drops
		d.add(err)
		ss.countDrops(d)
		ss.log.Debug("kvstream: dropped live message", "frames", len(frames), "err", err)
		return
	}
	ss.received.Add(1)
	key := ss.key(topic)
	if !ss.admit(key) {
		return
	}
	ss.seen[key] = ss.cfg.Now()
	items, req := ss.tr.Live(ss.scratch[:0], key, Message{Topic: string(topic), Seq: seq, Payload: payload}, ss.replayEndpoint(key) != "")
	if req != nil {
		ss.startReplay(*req)
	}
	ss.emit(items)
	clear(items)
	ss.scratch = items[:0]
}

// admit says whether a live message of key may be tracked: a key tracked
// already, or one Accept takes for which there is room.
func (ss *session) admit(key string) bool {
	if _, ok := ss.seen[key]; ok {
		return true
	}
	if ss.cfg.Accept != nil && !ss.cfg.Accept(key) {
		ss.unaccepted.Add(1)
		return false
	}
	if len(ss.seen) < ss.cfg.MaxKeys {
		return true
	}
	now := ss.cfg.Now()
	if now.Sub(ss.lastSweep) >= sweepEvery {
		ss.lastSweep = now
		ss.forgetIdle(now)
		if len(ss.seen) < ss.cfg.MaxKeys {
			return true
		}
	}
	ss.keysRefused.Add(1)
	ss.refusedSince++
	if now.Sub(ss.refusedLogged) >= warnEvery {
		ss.log.Warn("kvstream: too many publisher keys; dropping the messages of new ones (Config.MaxKeys)",
			"max_keys", ss.cfg.MaxKeys, "key", key, "refused_since_last_warning", ss.refusedSince)
		ss.refusedLogged, ss.refusedSince = now, 0
	}
	return false
}

// forgetIdle forgets the keys that delivered nothing for KeyIdle, unless
// a replay is under way for them.
func (ss *session) forgetIdle(now time.Time) {
	var items []Item
	for key, t := range ss.seen {
		if now.Sub(t) < ss.cfg.KeyIdle || ss.tr.Replaying(key) {
			continue
		}
		last, _ := ss.tr.Forget(key)
		delete(ss.seen, key)
		delete(ss.warned, key)
		ss.keysForgotten.Add(1)
		// What the key sends next is taken as its first message: the
		// consumer must not trust its state from before.
		items = append(items, Unrecoverable{Key: key, From: last + 1, To: last + 1})
	}
	if len(items) > 0 {
		ss.log.Info("kvstream: forgot idle publisher keys to make room", "forgotten", len(items), "idle", ss.cfg.KeyIdle)
	}
	ss.emit(items)
}

func (ss *session) startReplay(req ReplayRequest) {
	ep := ss.replayEndpoint(req.Key)
	ss.replays.Add(1)
	ss.log.Debug("kvstream: replay requested", "key", req.Key, "from", req.From, "replay_endpoint", ep)
	ss.wg.Add(1)
	go func() {
		defer ss.wg.Done()
		msgs, complete, dropped, err := fetchReplay(ss.ctx, ep, req.From, ss.cfg.ReplayTimeout, ss.opts, ss.log)
		select {
		case ss.replayed <- replayDone{req, msgs, complete, dropped, err}:
		case <-ss.ctx.Done():
		}
	}()
}

func (ss *session) onReplay(r replayDone) {
	ss.countDrops(r.dropped)
	if r.dropped.first != nil && !ss.warned[r.req.Key] {
		// Once per publisher: a publisher that frames its replies in a
		// way we do not read does so every time, and each of its gaps
		// then ends in lost batches.
		if _, tracked := ss.seen[r.req.Key]; tracked {
			ss.warned[r.req.Key] = true
		}
		ss.log.Warn("kvstream: dropped malformed replay replies; the batches they carried are lost",
			"key", r.req.Key, "replay_endpoint", ss.replayEndpoint(r.req.Key), "dropped", r.dropped.total(), "first_err", r.dropped.first)
	}
	if r.err != nil {
		ss.replayFails.Add(1)
		ss.log.Warn("kvstream: replay failed", "key", r.req.Key, "from", r.req.From, "received", len(r.msgs), "err", r.err)
	}
	res := ReplayResult{ID: r.req.ID, Key: r.req.Key, Messages: r.msgs, Complete: r.complete}
	items, req := ss.tr.Replayed(ss.scratch[:0], res, ss.replayEndpoint(r.req.Key) != "")
	if req != nil {
		ss.startReplay(*req)
	}
	ss.emit(items)
	clear(items)
	ss.scratch = items[:0]
}

// emit delivers items in order; it gives up when ctx is done.
func (ss *session) emit(items []Item) {
	for _, it := range items {
		switch v := it.(type) {
		case Gap:
			if !v.Healed {
				ss.gaps.Add(1)
			}
			ss.log.Debug("kvstream: gap", "key", v.Key, "from", v.From, "to", v.To, "healed", v.Healed)
		case Unrecoverable:
			ss.unrecoverable.Add(1)
			ss.log.Info("kvstream: batches lost", "key", v.Key, "from", v.From, "to", v.To)
		case Restart:
			ss.restarts.Add(1)
			ss.log.Info("kvstream: publisher restarted", "key", v.Key, "old_seq", v.OldSeq, "new_seq", v.NewSeq)
		}
		select {
		case ss.out <- it:
		case <-ss.ctx.Done():
			return
		}
	}
}
