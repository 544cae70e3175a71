// This file holds how a Socket's connections come and go: accept, redial, handshake, attach, detach.

package zmtp

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"
)

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
		if !errors.Is(err, ErrClosed) {
			s.cnt.handshakeFailures.Add(1)
			s.warn("zmtp: peer refused", "remote", c.RemoteAddr(), "err", err)
		}
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
		p.q.pushRaw(subscription(p.info, true, prefix), false)
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
