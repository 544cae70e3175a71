package kvstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
)

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("kvstream: bad config")

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
	// MaxHeld: see Tracker.MaxHeld.
	MaxHeld int
	// CatchUp replays a publisher's buffered history before its first
	// message (see Tracker.CatchUp); it needs a replay endpoint.
	CatchUp bool
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Stats are a Subscriber's counters since it was made.
type Stats struct {
	Received       uint64 // well-formed live messages read
	Malformed      uint64 // live messages and replay replies dropped
	Gaps           uint64 // gaps opened
	Unrecoverable  uint64 // Unrecoverable signals
	Restarts       uint64
	Reconnects     uint64
	Replays        uint64 // replay requests sent
	ReplayFailures uint64 // replays that ended without the end marker
}

// Subscriber reads one event stream (connect mode) or several (bind mode)
// and delivers an ordered stream of Items.
type Subscriber struct {
	cfg Config
	log *slog.Logger

	received, malformed, gaps, unrecoverable   atomic.Uint64
	restarts, reconnects, replays, replayFails atomic.Uint64
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
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Subscriber{cfg: cfg, log: log.With("endpoint", cfg.Endpoint)}, nil
}

// Stats returns the counters.
func (s *Subscriber) Stats() Stats {
	return Stats{
		Received:       s.received.Load(),
		Malformed:      s.malformed.Load(),
		Gaps:           s.gaps.Load(),
		Unrecoverable:  s.unrecoverable.Load(),
		Restarts:       s.restarts.Load(),
		Reconnects:     s.reconnects.Load(),
		Replays:        s.replays.Load(),
		ReplayFailures: s.replayFails.Load(),
	}
}

// Run subscribes and sends Items to out until ctx is done. It returns nil
// once ctx is done and every goroutine it started has exited, or an error
// if it cannot bind. It never closes out. Each Run starts with fresh
// sequence state; run one at a time.
//
// In connect mode a failed dial, or a receive error (the publisher went
// away), is retried with Backoff; after a lost connection comes back,
// Reconnected is sent. In bind mode with OnePublisher, Reconnected is sent
// before the first message read after the end of a connection (should a
// new connection deliver before the old one's end is read, the signal comes
// that much later). A publisher that vanishes without closing its TCP
// connection is not noticed: zmq4 has no heartbeats.
func (s *Subscriber) Run(ctx context.Context, out chan<- Item) error {
	ctx, cancel := context.WithCancel(ctx)
	ss := &session{
		Subscriber: s,
		ctx:        ctx,
		out:        out,
		opts:       socketOptions(s.log, s.cfg.DialTimeout),
		tr:         Tracker{MaxHeld: s.cfg.MaxHeld, CatchUp: s.cfg.CatchUp},
		replayed:   make(chan replayDone),
	}
	defer ss.wg.Wait()
	defer cancel()

	var (
		redial    <-chan time.Time
		timer     *time.Timer
		attempt   int
		connected bool // a connection existed: the next one is a reconnect
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		if ss.live != nil {
			ss.live.close()
		}
	}()
	retry := func() {
		d := s.cfg.Backoff.Delay(attempt)
		attempt++
		timer = time.NewTimer(d)
		redial = timer.C
	}

	if s.cfg.Bind {
		c, err := ss.open(true)
		if err != nil {
			return err
		}
		ss.live = c
	} else if c, err := ss.open(false); err != nil {
		s.log.Info("kvstream: dial failed, retrying", "err", err)
		retry()
	} else {
		ss.live, connected = c, true
	}

	for {
		var (
			recv <-chan received
			lost <-chan error
		)
		if ss.live != nil {
			recv, lost = ss.live.recv, ss.live.lost
		}
		select {
		case <-ctx.Done():
			return nil
		case r := <-recv:
			if r.afterEnd && s.cfg.OnePublisher {
				// The message comes from a new connection, maybe of a new
				// process whose seq already passed the last one seen: its
				// batches would pass for a gap or even for the next ones,
				// and a replay would hand the new process's history to a
				// consumer holding the old one's state.
				ss.reconnected()
			}
			ss.onLive(r.msg)
		case err := <-lost:
			s.log.Info("kvstream: publisher connection lost, redialing", "err", err)
			ss.live.close()
			ss.live = nil
			attempt = 0
			retry()
		case <-redial:
			redial = nil
			c, err := ss.open(false)
			if err != nil {
				s.log.Debug("kvstream: redial failed", "attempt", attempt, "err", err)
				retry()
				continue
			}
			ss.live, attempt = c, 0
			if connected {
				ss.reconnected()
			}
			connected = true
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
	opts     []zmq4.Option
	tr       Tracker
	scratch  []Item
	live     *liveConn
	replayed chan replayDone
	wg       sync.WaitGroup // replay fetches
}

type replayDone struct {
	req       ReplayRequest
	msgs      []Message
	complete  bool
	malformed int
	err       error
}

func (ss *session) reconnected() {
	ss.reconnects.Add(1)
	ss.log.Info("kvstream: reconnected")
	ss.emit([]Item{Reconnected{Endpoint: ss.cfg.Endpoint}})
}

func (ss *session) open(bind bool) (*liveConn, error) {
	sock := zmq4.NewSub(ss.ctx, ss.opts...)
	if err := sock.SetOption(zmq4.OptionSubscribe, ss.cfg.Topic); err != nil {
		_ = sock.Close()
		return nil, fmt.Errorf("kvstream: subscribe to topic %q: %w", ss.cfg.Topic, err)
	}
	if bind {
		if err := sock.Listen(ss.cfg.Endpoint); err != nil {
			_ = sock.Close()
			return nil, fmt.Errorf("kvstream: bind Endpoint %s: %w", ss.cfg.Endpoint, err)
		}
	} else if err := sock.Dial(ss.cfg.Endpoint); err != nil {
		_ = sock.Close()
		return nil, fmt.Errorf("kvstream: dial Endpoint %s: %w", ss.cfg.Endpoint, err)
	}
	c := &liveConn{
		sock: sock,
		recv: make(chan received),
		lost: make(chan error, 1),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	go c.read(bind, ss.log)
	return c, nil
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

func (ss *session) onLive(m zmq4.Msg) {
	if m.Type == zmq4.CmdMsg {
		return
	}
	topic, seq, payload, err := ParseMessage(m.Frames)
	if err != nil {
		ss.malformed.Add(1)
		ss.log.Debug("kvstream: dropped live message", "frames", len(m.Frames), "err", err)
		return
	}
	ss.received.Add(1)
	key := ss.key(topic)
	items, req := ss.tr.Live(ss.scratch[:0], key, Message{Topic: string(topic), Seq: seq, Payload: payload}, ss.replayEndpoint(key) != "")
	if req != nil {
		ss.startReplay(*req)
	}
	ss.emit(items)
	clear(items)
	ss.scratch = items[:0]
}

func (ss *session) startReplay(req ReplayRequest) {
	ep := ss.replayEndpoint(req.Key)
	ss.replays.Add(1)
	ss.log.Debug("kvstream: replay requested", "key", req.Key, "from", req.From, "replay_endpoint", ep)
	ss.wg.Add(1)
	go func() {
		defer ss.wg.Done()
		msgs, complete, malformed, err := fetchReplay(ss.ctx, ep, req.From, ss.cfg.ReplayTimeout, ss.opts, ss.log)
		select {
		case ss.replayed <- replayDone{req, msgs, complete, malformed, err}:
		case <-ss.ctx.Done():
		}
	}()
}

func (ss *session) onReplay(r replayDone) {
	ss.malformed.Add(uint64(r.malformed))
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

// liveConn is one SUB socket and the goroutine reading it.
type liveConn struct {
	sock zmq4.Socket
	recv chan received
	lost chan error // connect mode: the connection ended
	stop chan struct{}
	done chan struct{}
}

// received is a message read by a liveConn.
type received struct {
	msg zmq4.Msg
	// afterEnd (bind mode): a connection ended since the previous message.
	// zmq4 queues a connection's end after its last message, so msg is
	// from another connection.
	afterEnd bool
}

func (c *liveConn) read(bind bool, log *slog.Logger) {
	defer close(c.done)
	ended := false
	for {
		m, err := c.sock.Recv()
		if err != nil {
			if canceled(err) {
				return
			}
			if bind {
				// One publisher's connection ended; the socket still
				// serves the others and the one that comes back.
				log.Debug("kvstream: publisher connection ended", "err", err)
				ended = true
				continue
			}
			c.lost <- err
			return
		}
		select {
		case c.recv <- received{msg: m, afterEnd: ended}:
			ended = false
		case <-c.stop:
			return
		}
	}
}

func (c *liveConn) close() {
	close(c.stop)
	_ = c.sock.Close()
	<-c.done
	drain(c.sock)
}
