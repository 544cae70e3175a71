// This file holds a live connection: its reader and writer loops.

package zmtp

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const (
	readBuffer  = 16 << 10
	writeBuffer = 32 << 10
	// writeChunk is the most written under one deadline: WriteTimeout
	// bounds a stall, not the time a large message takes.
	writeChunk = 64 << 10
	// maxPingContext is the longest PING context (RFC 37).
	maxPingContext = 16
)

var (
	errHeartbeat = errors.New("zmtp: heartbeat timeout: the peer sent nothing")
	errPeerError = fmt.Errorf("%w: the peer sent ERROR", ErrProtocol)
)

// peer is one handshaken connection.
type peer struct {
	s        *Socket
	conn     net.Conn
	br       *bufio.Reader
	info     peerInfo
	serial   uint64
	identity []byte // ROUTER: the routing identity
	q        *queue
	subs     subscriptions // PUB: what the peer wants
	lastRecv atomic.Int64  // unix nanoseconds

	once  sync.Once
	done  chan struct{}
	cause error // why it ended, set before done closes
}

// close ends the connection, counting why first: a peer that sees the
// connection close finds the count already made.
func (p *peer) close(err error) {
	p.once.Do(func() {
		p.cause = err
		cnt := p.s.cnt
		switch {
		case errors.Is(err, ErrTooLarge):
			cnt.oversize.Add(1)
		case errors.Is(err, ErrProtocol):
			cnt.protocolErrors.Add(1)
		case errors.Is(err, errHeartbeat):
			cnt.heartbeatTimeouts.Add(1)
		case isTimeout(err):
			cnt.stalled.Add(1)
		}
		cnt.disconnects.Add(1)
		p.conn.Close()
		close(p.done)
	})
}

// run serves a handshaken peer until its connection ends.
func (s *Socket) run(p *peer) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.write()
	}()
	if !s.opt.Events || s.deliver(Msg{Peer: p.serial, Event: EventConnected}, p.done) {
		p.close(p.read())
	}
	p.close(ErrClosed)
	wg.Wait()
	s.detach(p)
	err := p.cause
	if errors.Is(err, ErrProtocol) || errors.Is(err, errHeartbeat) || isTimeout(err) {
		s.warn("zmtp: peer dropped", "remote", p.conn.RemoteAddr(), "err", err)
	} else {
		s.log.Debug("zmtp: peer gone", "remote", p.conn.RemoteAddr(), "err", err)
	}
	if s.opt.Events {
		// The socket may be closing: then nobody reads the event.
		s.deliver(Msg{Peer: p.serial, Event: EventDisconnected, Err: err}, nil)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// stamp records when bytes last arrived, for the heartbeat.
type stamp struct {
	r io.Reader
	t *atomic.Int64
}

func (s stamp) Read(b []byte) (int, error) {
	n, err := s.r.Read(b)
	if n > 0 {
		s.t.Store(time.Now().UnixNano())
	}
	return n, err
}

// read is the reader loop; it returns why the connection ended.
func (p *peer) read() error {
	s := p.s
	fr := frameReader{r: stamp{p.br, &p.lastRecv}, maxMsg: s.opt.MaxMsgSize, maxFrames: s.opt.MaxFrames}
	for {
		msg, cmd, err := fr.next()
		if err != nil {
			return err
		}
		if cmd != nil {
			if err := p.command(*cmd); err != nil {
				return err
			}
			continue
		}
		switch s.typ {
		case Pub:
			if err := p.subscriptionMessage(msg); err != nil {
				return err
			}
			continue
		case Sub:
			if !matchAny(*s.filter.Load(), msg[0]) {
				continue
			}
		case Router:
			msg = append([][]byte{p.identity}, msg...)
		}
		if !s.deliver(Msg{Frames: msg, Peer: p.serial}, p.done) {
			return ErrClosed
		}
	}
}

// command handles a command after the handshake.
func (p *peer) command(c command) error {
	switch c.name {
	case cmdPing:
		if len(c.data) < 2 {
			return fmt.Errorf("%w: PING of %d bytes has no TTL", ErrProtocol, len(c.data))
		}
		ctx := c.data[2:]
		if len(ctx) > maxPingContext {
			return fmt.Errorf("%w: PING context of %d bytes, limit %d", ErrProtocol, len(ctx), maxPingContext)
		}
		p.q.pushRaw(appendCommand(nil, cmdPong, ctx), true)
	case cmdPong:
	case cmdSubscribe, cmdCancel:
		if p.s.typ != Pub {
			return nil
		}
		if c.name == cmdCancel {
			p.subs.cancel(c.data)
			return nil
		}
		return p.subs.add(c.data, p.s.opt.MaxSubscriptions)
	case cmdError:
		return errPeerError
	case cmdReady:
		return fmt.Errorf("%w: READY after the handshake", ErrProtocol)
	}
	// Unknown commands are for later versions: ignore them.
	return nil
}

// subscriptionMessage handles what a SUB peer sends a PUB: ZMTP 3.0
// subscriptions, a one-frame message led by 1 (subscribe) or 0 (cancel).
// Anything else is ignored, as ZMQ PUB does.
func (p *peer) subscriptionMessage(msg [][]byte) error {
	if len(msg) != 1 || len(msg[0]) == 0 {
		return nil
	}
	switch msg[0][0] {
	case 1:
		return p.subs.add(msg[0][1:], p.s.opt.MaxSubscriptions)
	case 0:
		p.subs.cancel(msg[0][1:])
	}
	return nil
}

// deadlineWriter gives each chunk of a write WriteTimeout to go through.
type deadlineWriter struct {
	c net.Conn
	d time.Duration
}

func (w deadlineWriter) Write(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		if err := w.c.SetWriteDeadline(time.Now().Add(w.d)); err != nil {
			return n, err
		}
		m, err := w.c.Write(b[n:min(len(b), n+writeChunk)])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// write is the writer loop: it ends when the peer does, or closes it on a
// write error or heartbeat timeout.
func (p *peer) write() {
	s := p.s
	bw := bufio.NewWriterSize(deadlineWriter{p.conn, s.opt.WriteTimeout}, writeBuffer)
	var tick <-chan time.Time
	if s.opt.Heartbeat > 0 && p.info.speaks31() {
		t := time.NewTicker(s.opt.Heartbeat)
		defer t.Stop()
		tick = t.C
	}
	var (
		batch []outMsg
		hdr   []byte
	)
	for {
		select {
		case <-p.done:
			return
		case <-tick:
			if time.Since(time.Unix(0, p.lastRecv.Load())) > s.opt.HeartbeatTimeout {
				p.close(errHeartbeat)
				return
			}
			p.q.pushRaw(ping(s.opt.HeartbeatTimeout), true)
			continue
		case <-p.q.ready:
		}
		batch = p.q.take(batch)
		var err error
		for _, m := range batch {
			if m.raw != nil {
				_, err = bw.Write(m.raw)
			} else {
				for i, f := range m.frames {
					flags := byte(0)
					if i < len(m.frames)-1 {
						flags = flagMore
					}
					hdr = appendFrameHeader(hdr[:0], flags, len(f))
					if _, err = bw.Write(hdr); err == nil {
						_, err = bw.Write(f)
					}
					if err != nil {
						break
					}
				}
			}
			if err != nil {
				break
			}
		}
		if err == nil {
			err = bw.Flush()
		}
		clear(batch)
		if err != nil {
			p.close(err)
			return
		}
	}
}

// ping frames a PING whose TTL (in tenths of a second) tells the peer how
// long we wait for traffic.
func ping(timeout time.Duration) []byte {
	ttl := min(timeout/(100*time.Millisecond), 0xFFFF)
	return appendCommand(nil, cmdPing, binary.BigEndian.AppendUint16(nil, uint16(ttl)))
}
