// This file holds Socket: options, binding, connecting, sending, receiving
// and closing.
package zmtp

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Options.
const (
	DefaultMaxMsgSize       = 16 << 20
	DefaultMaxFrames        = 64
	DefaultMaxSubscriptions = 1024
	DefaultMaxPeers         = 1024
	DefaultHandshakeTimeout = 5 * time.Second
	DefaultDialTimeout      = 5 * time.Second
	DefaultWriteTimeout     = 10 * time.Second
	DefaultSendHWM          = 1000
	DefaultRecvHWM          = 1000
	// DefaultHeartbeatTimeouts is HeartbeatTimeout in Heartbeat intervals.
	DefaultHeartbeatTimeouts = 3
	defaultReconnectMin      = 100 * time.Millisecond
	defaultReconnectMax      = 5 * time.Second
)

// Options configure a Socket. Zero fields take the defaults.
type Options struct {
	// MaxMsgSize bounds a message's bytes, all frames together.
	MaxMsgSize int64
	// MaxFrames bounds a message's frames.
	MaxFrames int
	// MaxSubscriptions bounds the distinct prefixes a SUB peer of a PUB
	// may subscribe.
	MaxSubscriptions int
	// MaxPeers bounds a socket's incoming connections, handshaking or not.
	MaxPeers int
	// HandshakeTimeout bounds the greeting and READY exchange.
	HandshakeTimeout time.Duration
	// DialTimeout bounds one connect attempt.
	DialTimeout time.Duration
	// WriteTimeout: a peer that accepts no byte for this long is dropped.
	WriteTimeout time.Duration
	// SendHWM bounds the messages queued for one peer.
	SendHWM int
	// RecvHWM bounds the messages received and not yet taken by Recv.
	RecvHWM int
	// Heartbeat, if positive, sends a PING every Heartbeat to each peer
	// that speaks ZMTP 3.1 and drops one that sends nothing for
	// HeartbeatTimeout (default DefaultHeartbeatTimeouts intervals).
	Heartbeat        time.Duration
	HeartbeatTimeout time.Duration
	// ReconnectDelay is the wait before redial number attempt (0 for the
	// first) of a Connect; default 100 ms doubling up to 5 s.
	ReconnectDelay func(attempt int) time.Duration
	// Identity goes in the READY of a ROUTER or DEALER (a ROUTER peer
	// routes to us by it); empty lets the peer choose.
	Identity []byte
	// Events delivers EventConnected and EventDisconnected through Recv,
	// in order with the messages of the connection.
	Events bool
	// Counters, if set, is where the socket counts (several sockets may
	// share it); otherwise the socket has its own.
	Counters *Counters
	Logger   *slog.Logger
}

func (o *Options) defaults() {
	if o.MaxMsgSize <= 0 {
		o.MaxMsgSize = DefaultMaxMsgSize
	}
	if o.MaxFrames <= 0 {
		o.MaxFrames = DefaultMaxFrames
	}
	if o.MaxSubscriptions <= 0 {
		o.MaxSubscriptions = DefaultMaxSubscriptions
	}
	if o.MaxPeers <= 0 {
		o.MaxPeers = DefaultMaxPeers
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.SendHWM <= 0 {
		o.SendHWM = DefaultSendHWM
	}
	if o.RecvHWM <= 0 {
		o.RecvHWM = DefaultRecvHWM
	}
	if o.Heartbeat > 0 && o.HeartbeatTimeout <= 0 {
		o.HeartbeatTimeout = DefaultHeartbeatTimeouts * o.Heartbeat
	}
	if o.ReconnectDelay == nil {
		o.ReconnectDelay = func(attempt int) time.Duration {
			d := defaultReconnectMin
			for i := 0; i < attempt && d < defaultReconnectMax; i++ {
				d *= 2
			}
			return min(d, defaultReconnectMax)
		}
	}
	if o.Counters == nil {
		o.Counters = new(Counters)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Event says what a Msg from Recv is.
type Event uint8

const (
	// EventMessage: Frames holds a message.
	EventMessage Event = iota
	// EventConnected: connection Peer completed its handshake; its
	// messages follow.
	EventConnected
	// EventDisconnected: connection Peer ended, after its last message;
	// Err says why.
	EventDisconnected
)

// Msg is what Recv returns.
type Msg struct {
	// Frames of a message. A ROUTER puts the sender's identity first.
	Frames [][]byte
	// Peer numbers the connection it came from, from 1, per socket.
	Peer  uint64
	Event Event
	Err   error
}

// Socket is a ZMTP socket of one Type. It is safe for concurrent use.
type Socket struct {
	typ  Type
	opt  Options
	log  *slog.Logger
	cnt  *Counters
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup
	in   chan Msg

	serial atomic.Uint64
	peers  atomic.Pointer[[]*peer]  // live peers, copied on change
	filter atomic.Pointer[[]string] // SUB: our subscriptions

	mu      sync.Mutex
	closed  bool
	conns   map[net.Conn]bool // every open connection; true if accepted
	inbound int               // accepted connections (MaxPeers)
	lns     []net.Listener
	byID    map[string]*peer // ROUTER
	changed chan struct{}    // closed and replaced when peers change
	rr      int              // DEALER round robin
	subs    []string         // SUB, with repeats
	nextGen uint32           // ROUTER generated identities
	warned  time.Time        // last warning logged
}

// New returns a socket of type t.
func New(t Type, opt Options) (*Socket, error) {
	if _, ok := compatible[t]; !ok {
		return nil, fmt.Errorf("%w: %q", ErrType, t)
	}
	opt.defaults()
	ctx, stop := context.WithCancel(context.Background())
	s := &Socket{
		typ: t, opt: opt, log: opt.Logger, cnt: opt.Counters,
		ctx: ctx, stop: stop,
		in:      make(chan Msg, opt.RecvHWM),
		conns:   make(map[net.Conn]bool),
		byID:    make(map[string]*peer),
		changed: make(chan struct{}),
	}
	s.peers.Store(new([]*peer))
	s.filter.Store(new([]string))
	return s, nil
}

// Type is the socket's type.
func (s *Socket) Type() Type { return s.typ }

// Stats reads the socket's counters (shared ones if Options.Counters).
func (s *Socket) Stats() Stats { return s.cnt.Snapshot() }

// Listen binds endpoint and accepts peers on it until Close.
func (s *Socket) Listen(ep string) error {
	e, err := parseEndpoint(ep, true)
	if err != nil {
		return err
	}
	l, err := e.listen()
	if err != nil {
		return fmt.Errorf("zmtp: bind %s: %w", ep, err)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return ErrClosed
	}
	s.lns = append(s.lns, l)
	s.wg.Add(1)
	s.mu.Unlock()
	go s.accept(l)
	return nil
}

// Addr is the address the first Listen bound (nil before).
func (s *Socket) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.lns) == 0 {
		return nil
	}
	return s.lns[0].Addr()
}

// Connect connects to ep in the background, and again after
// ReconnectDelay whenever an attempt fails or the connection ends, until
// Close.
func (s *Socket) Connect(ep string) error {
	e, err := parseEndpoint(ep, false)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.wg.Add(1)
	go s.reconnect(e)
	return nil
}

// Dial connects to ep once and returns when the handshake is done; the
// connection is not redialed when it ends.
func (s *Socket) Dial(ctx context.Context, ep string) error {
	e, err := parseEndpoint(ep, false)
	if err != nil {
		return err
	}
	conn, err := e.dial(ctx, s.opt.DialTimeout)
	if err != nil {
		s.cnt.dialFailures.Add(1)
		return fmt.Errorf("zmtp: dial %s: %w", ep, err)
	}
	if !s.track(conn, false) {
		return ErrClosed
	}
	p, err := s.establish(ctx, conn)
	if err != nil {
		s.untrack(conn)
		return fmt.Errorf("zmtp: %s: %w", ep, err)
	}
	// Close may have begun meanwhile: only then is wg.Add too late.
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.detach(p)
		s.untrack(conn)
		return ErrClosed
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		s.run(p)
		s.untrack(conn)
	}()
	return nil
}

// Subscribe adds a prefix filter to a SUB socket ("" takes everything).
func (s *Socket) Subscribe(prefix string) error {
	if s.typ != Sub {
		return fmt.Errorf("%w: Subscribe on %s", ErrType, s.typ)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subs = append(s.subs, prefix)
	f := append([]string(nil), s.subs...)
	s.filter.Store(&f)
	for _, p := range *s.peers.Load() {
		p.q.pushRaw(subscription(p.info, true, prefix))
	}
	return nil
}

// subscription frames a subscribe (or cancel) the way peer understands.
func subscription(peer peerInfo, subscribe bool, prefix string) []byte {
	if peer.speaks31() {
		name := cmdCancel
		if subscribe {
			name = cmdSubscribe
		}
		return appendCommand(nil, name, []byte(prefix))
	}
	flag := byte(0)
	if subscribe {
		flag = 1
	}
	b := appendFrameHeader(nil, 0, 1+len(prefix))
	return append(append(b, flag), prefix...)
}

// Send sends a message. A PUB sends it to every peer subscribed to its
// first frame and never blocks: a peer at its SendHWM misses it (counted
// in SendDropped). A ROUTER sends frames[1:] to the peer whose identity
// is frames[0] (ErrNoPeer if none). A DEALER sends to its peers in turn,
// waiting for one if none is connected. ROUTER and DEALER wait for room in
// the peer's queue until ctx ends. The frames must not be modified after.
func (s *Socket) Send(ctx context.Context, frames [][]byte) error {
	if len(frames) == 0 {
		return fmt.Errorf("zmtp: Send: empty message")
	}
	if s.ctx.Err() != nil {
		return ErrClosed
	}
	switch s.typ {
	case Pub:
		for _, p := range *s.peers.Load() {
			if !p.subs.match(frames[0]) {
				continue
			}
			if !p.q.push(frames, s.opt.SendHWM) {
				s.cnt.sendDropped.Add(1)
			}
		}
		return nil
	case Router:
		s.mu.Lock()
		p := s.byID[string(frames[0])]
		s.mu.Unlock()
		if p == nil || len(frames) < 2 {
			return fmt.Errorf("%w: identity %x", ErrNoPeer, frames[0])
		}
		return s.push(ctx, p, frames[1:])
	case Dealer:
		for {
			s.mu.Lock()
			peers, changed := *s.peers.Load(), s.changed
			var p *peer
			if len(peers) > 0 {
				s.rr = (s.rr + 1) % len(peers)
				p = peers[s.rr]
			}
			s.mu.Unlock()
			if p != nil {
				err := s.push(ctx, p, frames)
				if !errors.Is(err, errPeerGone) {
					return err
				}
				continue
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return ctx.Err()
			case <-s.ctx.Done():
				return ErrClosed
			}
		}
	}
	return fmt.Errorf("%w: Send on %s", ErrType, s.typ)
}

var errPeerGone = fmt.Errorf("%w: the peer disconnected", ErrNoPeer)

// push waits for room in p's queue.
func (s *Socket) push(ctx context.Context, p *peer, frames [][]byte) error {
	for !p.q.push(frames, s.opt.SendHWM) {
		select {
		case <-p.q.space:
		case <-p.done:
			return errPeerGone
		case <-ctx.Done():
			return ctx.Err()
		case <-s.ctx.Done():
			return ErrClosed
		}
	}
	return nil
}

// Recv returns the next message (or event, with Options.Events).
func (s *Socket) Recv(ctx context.Context) (Msg, error) {
	select {
	case m := <-s.in:
		return m, nil
	case <-ctx.Done():
		return Msg{}, ctx.Err()
	case <-s.ctx.Done():
		return Msg{}, ErrClosed
	}
}

// C is the channel Recv reads, for select loops. It is never closed.
func (s *Socket) C() <-chan Msg { return s.in }

// Close closes every listener and connection and waits for every
// goroutine the socket started. Messages not yet written are lost.
func (s *Socket) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.stop()
	for _, l := range s.lns {
		l.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// track records an open connection; false (and the connection closed) if
// the socket is closed, or, for an accepted one, MaxPeers is reached.
func (s *Socket) track(c net.Conn, accepted bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || accepted && s.inbound >= s.opt.MaxPeers {
		if !s.closed {
			s.cnt.refused.Add(1)
		}
		c.Close()
		return false
	}
	s.conns[c] = accepted
	if accepted {
		s.inbound++
	}
	return true
}

func (s *Socket) untrack(c net.Conn) {
	c.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	if accepted, ok := s.conns[c]; ok {
		delete(s.conns, c)
		if accepted {
			s.inbound--
		}
	}
}

func (s *Socket) accept(l net.Listener) {
	defer s.wg.Done()
	var delay time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if s.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors and the like: wait, as net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.log.Warn("zmtp: accept failed", "addr", l.Addr(), "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
			case <-s.ctx.Done():
				return
			}
			continue
		}
		delay = 0
		if !s.track(c, true) {
			if s.ctx.Err() == nil {
				s.warn("zmtp: peer refused: MaxPeers reached", "addr", l.Addr(), "remote", c.RemoteAddr(), "max_peers", s.opt.MaxPeers)
			}
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.untrack(c)
			p, err := s.establish(s.ctx, c)
			if err != nil {
				return
			}
			s.run(p)
		}()
	}
}

// reconnect is a Connect's loop.
func (s *Socket) reconnect(e endpoint) {
	defer s.wg.Done()
	for attempt := 0; ; attempt++ {
		conn, err := e.dial(s.ctx, s.opt.DialTimeout)
		if err == nil && s.track(conn, false) {
			p, err := s.establish(s.ctx, conn)
			if err == nil {
				attempt = 0
				s.run(p)
			}
			s.untrack(conn)
		} else if err != nil && s.ctx.Err() == nil {
			s.cnt.dialFailures.Add(1)
			lvl := slog.LevelDebug
			if attempt == 0 {
				lvl = slog.LevelInfo
			}
			s.log.Log(s.ctx, lvl, "zmtp: dial failed, retrying", "endpoint", e, "attempt", attempt, "err", err)
		}
		if s.ctx.Err() != nil {
			return
		}
		t := time.NewTimer(s.opt.ReconnectDelay(attempt))
		select {
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// establish runs the handshake and registers the peer.
func (s *Socket) establish(ctx context.Context, c net.Conn) (*peer, error) {
	br := bufio.NewReaderSize(c, readBuffer)
	info, err := handshake(ctx, c, br, s.typ, s.opt.Identity, s.opt.HandshakeTimeout)
	if err == nil {
		err = s.checkIdentity(info)
	}
	if err != nil {
		if s.ctx.Err() == nil {
			s.cnt.handshakeFailures.Add(1)
			if errors.Is(err, ErrTooLarge) {
				s.cnt.oversize.Add(1)
			}
			s.warn("zmtp: handshake failed", "remote", c.RemoteAddr(), "err", err)
		}
		c.Close()
		return nil, err
	}
	p := &peer{
		s: s, conn: c, br: br, info: info,
		serial: s.serial.Add(1),
		q:      newQueue(),
		done:   make(chan struct{}),
	}
	p.lastRecv.Store(time.Now().UnixNano())
	if err := s.attach(p); err != nil {
		s.cnt.handshakeFailures.Add(1)
		s.warn("zmtp: peer refused", "remote", c.RemoteAddr(), "err", err)
		c.Close()
		return nil, err
	}
	s.cnt.connections.Add(1)
	return p, nil
}

// checkIdentity refuses an identity a ROUTER cannot route by.
func (s *Socket) checkIdentity(info peerInfo) error {
	if s.typ == Router && len(info.identity) > 0 && info.identity[0] == 0 {
		// Zero-led identities are the ones we generate.
		return fmt.Errorf("%w: peer identity %x starts with a zero byte", ErrHandshake, info.identity)
	}
	return nil
}

// attach makes p a live peer: routable, and sent our subscriptions.
func (s *Socket) attach(p *peer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.typ == Router {
		id := p.info.identity
		if len(id) == 0 {
			s.nextGen++
			id = binary.BigEndian.AppendUint32([]byte{0}, s.nextGen)
		}
		if _, dup := s.byID[string(id)]; dup {
			return fmt.Errorf("%w: identity %x is already connected", ErrHandshake, id)
		}
		p.identity = id
		s.byID[string(id)] = p
	}
	for _, prefix := range s.subs {
		p.q.pushRaw(subscription(p.info, true, prefix))
	}
	old := *s.peers.Load()
	peers := append(append(make([]*peer, 0, len(old)+1), old...), p)
	s.peers.Store(&peers)
	close(s.changed)
	s.changed = make(chan struct{})
	return nil
}

func (s *Socket) detach(p *peer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.typ == Router && s.byID[string(p.identity)] == p {
		delete(s.byID, string(p.identity))
	}
	old := *s.peers.Load()
	peers := make([]*peer, 0, len(old))
	for _, q := range old {
		if q != p {
			peers = append(peers, q)
		}
	}
	s.peers.Store(&peers)
	close(s.changed)
	s.changed = make(chan struct{})
}

// deliver hands a message to Recv; false if the peer or socket ended first.
func (s *Socket) deliver(m Msg, done <-chan struct{}) bool {
	select {
	case s.in <- m:
		return true
	case <-done:
		return false
	case <-s.ctx.Done():
		return false
	}
}

// warnEvery spaces warnings about peers: a stranger can cause them at will.
const warnEvery = 10 * time.Second

// warn logs at Warn at most once per warnEvery, at Debug otherwise.
func (s *Socket) warn(msg string, args ...any) {
	s.mu.Lock()
	now := time.Now()
	lvl := slog.LevelDebug
	if now.Sub(s.warned) >= warnEvery {
		s.warned, lvl = now, slog.LevelWarn
	}
	s.mu.Unlock()
	s.log.Log(context.Background(), lvl, msg, args...)
}
