// This file holds Socket: binding, connecting, sending, receiving and closing.

package zmtp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

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
// As in ZMQ, a prefix subscribed twice takes two Unsubscribes.
func (s *Socket) Subscribe(prefix string) error {
	return s.subscribe(true, prefix)
}

// Unsubscribe drops one subscription to prefix; an unknown one is ignored.
func (s *Socket) Unsubscribe(prefix string) error {
	return s.subscribe(false, prefix)
}

func (s *Socket) subscribe(add bool, prefix string) error {
	if s.typ != Sub {
		return fmt.Errorf("%w: subscriptions on %s", ErrType, s.typ)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		s.subs = append(s.subs, prefix)
	} else if i := slices.Index(s.subs, prefix); i >= 0 {
		s.subs = slices.Delete(s.subs, i, i+1)
	} else {
		return nil
	}
	f := slices.Clone(s.subs)
	s.filter.Store(&f)
	for _, p := range *s.peers.Load() {
		p.q.pushRaw(subscription(p.info, add, prefix), false)
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
