// This file holds Server: peers' FETCHes answered from a runner's pool over TCP.

package runner

import (
	"crypto/hmac"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/zeebo/xxh3"
)

// Server answers peers' fetches from a Runner's pool: one per rank, on that
// rank's control endpoint. Each block is sent under a pin, so eviction
// cannot tear it mid-send; keys no longer held are answered MISSING. A
// connection holds at most one pin at a time, and a FETCH holds pins only
// until its FetchTimeout.
//
// Slots are bounded in all (MaxConns) and per client address
// (MaxConnsPerClient); a connection must finish its handshake within
// HandshakeTimeout and, once authenticated, send a FETCH within each
// IdleTimeout. Refusals are counted (Stats) and logged at most once per
// refusalLogEvery.
type Server struct {
	r   *Runner
	cfg TCPConfig
	log *slog.Logger
	now func() time.Time // for the log rate limits

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]string // → client key
	adm       *admission
	closed    bool
	stats     ServerStats
	refuseLog logLimiter
	expireLog logLimiter
	wg        sync.WaitGroup
}

// refusalLogEvery spaces the warnings about refused connections and cut
// fetches: a flood of either costs one line per interval, with a count.
const refusalLogEvery = 10 * time.Second

// ServerStats are a Server's connection counters.
type ServerStats struct {
	// Conns is the number of connections open now.
	Conns int `json:"conns"`
	// RefusedFull counts connections refused because MaxConns were open.
	RefusedFull uint64 `json:"refused_full"`
	// RefusedClient counts connections refused because their client had
	// MaxConnsPerClient open.
	RefusedClient uint64 `json:"refused_client"`
	// HandshakeTimeouts counts connections closed for not finishing the
	// handshake within HandshakeTimeout (strangers that connect and idle).
	HandshakeTimeouts uint64 `json:"handshake_timeouts"`
}

// NewServer serves r's blocks; cfg.BlockBytes must match r's.
func NewServer(r *Runner, cfg TCPConfig) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.BlockBytes != r.BlockBytes() {
		return nil, fmt.Errorf("%w: server block bytes %d differ from the runner's %d", ErrConfig, cfg.BlockBytes, r.BlockBytes())
	}
	return &Server{
		r:         r,
		cfg:       cfg,
		log:       cfg.Logger.With("component", "runner-server"),
		now:       time.Now,
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[net.Conn]string),
		adm:       newAdmission(cfg.MaxConns, cfg.MaxConnsPerClient),
		refuseLog: logLimiter{every: refusalLogEvery},
		expireLog: logLimiter{every: refusalLogEvery},
	}, nil
}

// Serve accepts connections on l until Close; it returns nil after Close.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return ErrClosed
	}
	s.listeners[l] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	var backoff time.Duration
	for {
		conn, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			if closed || errors.Is(err, net.ErrClosed) {
				delete(s.listeners, l)
			}
			s.mu.Unlock()
			if closed {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("accept: %w", err)
			}
			// Out of file descriptors and the like: back off and retry
			// rather than spin or stop serving.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("accept failed; retrying", "err", err, "backoff", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		client := clientKey(conn.RemoteAddr())
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			conn.Close()
			continue
		}
		if why := s.adm.admit(client); why != refuseNone {
			s.refuse(conn, client, why)
			continue
		}
		s.conns[conn] = client
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(conn, client)
	}
}

// refuseWriteTimeout bounds the ERROR frame sent to a refused connection.
// A fresh socket's send buffer takes it at once; the bound only keeps the
// accept loop from ever waiting on a stranger.
const refuseWriteTimeout = 10 * time.Millisecond

// refuse counts and closes a connection admission refused, telling the
// client why (best effort: it may not read it before the close). It is
// called with s.mu held and releases it.
func (s *Server) refuse(conn net.Conn, client string, why refusal) {
	var text string
	switch why {
	case refuseClient:
		s.stats.RefusedClient++
		text = fmt.Sprintf("server busy: %d connections open from your address, its most (MaxConnsPerClient)", s.cfg.MaxConnsPerClient)
	default:
		s.stats.RefusedFull++
		text = fmt.Sprintf("server busy: %d connections open, its most (MaxConns)", s.cfg.MaxConns)
	}
	suppressed, logIt := s.refuseLog.allow(s.now())
	open, fromClient := s.adm.total, s.adm.byClient[client]
	s.mu.Unlock()
	conn.SetWriteDeadline(time.Now().Add(refuseWriteTimeout))
	conn.Write(appendError(nil, codeBusy, text))
	conn.Close()
	if logIt {
		s.log.Warn("runner peer port refusing connections; hinted pulls from refused peers fail",
			"reason", why.String(), "client", client, "open", open, "open_from_client", fromClient,
			"max_conns", s.cfg.MaxConns, "max_conns_per_client", s.cfg.MaxConnsPerClient,
			"refusals_not_logged", suppressed)
	}
}

// Stats returns the server's connection counters.
func (s *Server) Stats() ServerStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Conns = len(s.conns)
	return st
}

// Close stops accepting, closes every connection, and returns once every
// connection goroutine has ended and released its pins.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for l := range s.listeners {
		l.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

type session struct {
	conn    net.Conn
	out     []byte
	in      []byte
	keys    []uint64
	vecArr  [2][]byte
	vec     net.Buffers
	hdr     [headerLen]byte
	limits  func(uint8) (int, int, bool)
	blockSz int
}

func (s *Server) serveConn(conn net.Conn, client string) {
	defer s.wg.Done()
	defer func() {
		conn.Close()
		s.mu.Lock()
		delete(s.conns, conn)
		s.adm.release(client)
		s.mu.Unlock()
	}()
	tuneConn(conn, s.cfg.SocketBuffer)
	ss := &session{conn: conn, limits: serverLimits(s.cfg.MaxKeysPerFetch), blockSz: s.cfg.BlockBytes}
	if err := s.handshake(ss); err != nil {
		if errors.Is(err, errPinged) {
			return
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			s.mu.Lock()
			s.stats.HandshakeTimeouts++
			s.mu.Unlock()
		}
		s.log.Debug("peer handshake failed", "peer", conn.RemoteAddr(), "err", err)
		return
	}
	for {
		if err := s.serveFetch(ss); err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.log.Debug("peer connection ended", "peer", conn.RemoteAddr(), "err", err)
			}
			return
		}
	}
}

// readFrame reads one frame from the client into ss.in.
func (ss *session) readFrame() (header, error) {
	if _, err := io.ReadFull(ss.conn, ss.hdr[:]); err != nil {
		return header{}, err
	}
	h, err := parseHeader(ss.hdr[:], ss.limits)
	if err != nil {
		code := uint16(codeProtocol)
		if errors.Is(err, ErrFrameTooLarge) {
			code = codeTooLarge
		}
		ss.conn.Write(appendError(nil, code, err.Error()))
		return header{}, err
	}
	if cap(ss.in) < h.n {
		ss.in = make([]byte, h.n)
	}
	ss.in = ss.in[:h.n]
	if _, err := io.ReadFull(ss.conn, ss.in); err != nil {
		return header{}, err
	}
	return h, nil
}

// handshake runs the handshake, all of it within HandshakeTimeout of now.
func (s *Server) handshake(ss *session) error {
	ss.conn.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	h, err := ss.readFrame()
	if err != nil {
		return err
	}
	if h.typ == msgPing {
		if _, err := ss.conn.Write(appendPong(nil, s.r.Epoch())); err != nil {
			return err
		}
		return errPinged
	}
	if h.typ != msgHello {
		return fmt.Errorf("%w: message type %d before HELLO", ErrProtocol, h.typ)
	}
	var cnonce [nonceLen]byte
	copy(cnonce[:], ss.in)
	ch := challenge{auth: len(s.cfg.Secret) > 0, blockBytes: s.cfg.BlockBytes, maxKeys: s.cfg.MaxKeysPerFetch, nonce: newNonce()}
	if ch.auth {
		ch.mac = handshakeMAC(s.cfg.Secret, macLabelSrv, &cnonce, &ch.nonce)
	}
	if _, err := ss.conn.Write(appendChallenge(nil, ch)); err != nil {
		return err
	}
	if h, err = ss.readFrame(); err != nil {
		return err
	}
	if h.typ != msgAuth {
		return fmt.Errorf("%w: message type %d, want AUTH", ErrProtocol, h.typ)
	}
	if ch.auth {
		want := handshakeMAC(s.cfg.Secret, macLabelCli, &ch.nonce, &cnonce)
		if !hmac.Equal(ss.in, want[:]) {
			ss.conn.Write(appendError(nil, codeAuth, "wrong or missing shared secret: set the same secret option on every member"))
			return fmt.Errorf("%w: peer %s sent a wrong MAC", ErrAuth, ss.conn.RemoteAddr())
		}
	}
	if _, err := ss.conn.Write(appendHeader(nil, msgReady, 0)); err != nil {
		return err
	}
	return nil
}

// serveFetch answers one FETCH, within FetchTimeout of reading it.
func (s *Server) serveFetch(ss *session) error {
	ss.conn.SetDeadline(time.Now().Add(s.cfg.IdleTimeout))
	h, err := ss.readFrame()
	if err != nil {
		return err
	}
	if h.typ != msgFetch {
		ss.conn.Write(appendError(nil, codeProtocol, "expected FETCH"))
		return fmt.Errorf("%w: message type %d, want FETCH", ErrProtocol, h.typ)
	}
	if ss.keys, err = parseFetch(ss.in, ss.keys); err != nil {
		ss.conn.Write(appendError(nil, codeProtocol, err.Error()))
		return err
	}
	// Like every other bound here, the deadline is the socket's: a send
	// blocked past it fails at once, with no timer or goroutine of ours.
	deadline := time.Now().Add(s.cfg.FetchTimeout)
	ss.out = ss.out[:0]
	for i, k := range ss.keys {
		now := time.Now()
		if !now.Before(deadline) {
			// Checked before pinning: nothing is pinned past the deadline.
			return s.expire(ss, i, "fetch_timeout", s.cfg.FetchTimeout)
		}
		slot, sum, known, ok := s.r.acquire(k)
		if !ok {
			ss.out = appendMissing(ss.out, k)
			continue
		}
		data := s.r.pool.Buffer(slot)
		if !known {
			// Computed once, on first serve, and cached in the slot.
			sum = xxh3.Hash(data)
		}
		ss.out = appendBlockHead(ss.out, k, sum, ss.blockSz)
		err := s.sendWithin(ss, data, now, deadline, i)
		// The one pin this FETCH holds is dropped whatever the send did.
		s.r.releaseSlot(slot, sum, !known)
		if err != nil {
			return err
		}
	}
	ss.out = appendHeader(ss.out, msgEnd, 0)
	return s.sendWithin(ss, nil, time.Now(), deadline, len(ss.keys))
}

// sendWithin sends data by IOTimeout from now, but never past the FETCH's
// deadline. A send either bound cuts off expires the FETCH after answered
// of its keys: the peer stopped reading, or reads too slowly.
func (s *Server) sendWithin(ss *session, data []byte, now, fetchDeadline time.Time, answered int) error {
	dl, bound, timeout := now.Add(s.cfg.IOTimeout), "io_timeout", s.cfg.IOTimeout
	if fetchDeadline.Before(dl) {
		dl, bound, timeout = fetchDeadline, "fetch_timeout", s.cfg.FetchTimeout
	}
	err := ss.send(data, dl)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		return s.expire(ss, answered, bound, timeout)
	}
	return err
}

// errFetchExpired ends a connection whose FETCH outlived FetchTimeout, or
// one of whose sends outlived IOTimeout.
var errFetchExpired = errors.New("fetch deadline exceeded")

// expire counts a FETCH cut off by bound (timeout long) after answered of
// its keys and makes its connection reset when serveConn closes it. A
// reset, not a FIN: the peer may be mid-block, and the wire has no way to
// end a block early, so it must see a failed stream (its reads fail; a
// truncated block never passes its checksum), and the kernel drops the
// unsent bytes at once instead of holding them for a peer that does not
// read.
func (s *Server) expire(ss *session, answered int, bound string, timeout time.Duration) error {
	s.r.countServeExpired()
	if tc, ok := ss.conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	s.mu.Lock()
	suppressed, logIt := s.expireLog.allow(s.now())
	s.mu.Unlock()
	if logIt {
		s.log.Warn("peer stopped reading a fetch's answer in time; connection reset",
			"peer", ss.conn.RemoteAddr(), "answered", answered, "keys", len(ss.keys), "bound", bound, "timeout", timeout,
			"expiries_not_logged", suppressed)
	}
	return fmt.Errorf("%w: %d of %d keys answered, a send outlived %s %v", errFetchExpired, answered, len(ss.keys), bound, timeout)
}

// send writes the pending small frames and data in one writev, by dl.
func (ss *session) send(data []byte, dl time.Time) error {
	ss.conn.SetWriteDeadline(dl)
	ss.vec = append(ss.vecArr[:0], ss.out)
	if data != nil {
		ss.vec = append(ss.vec, data)
	}
	_, err := ss.vec.WriteTo(ss.conn)
	ss.vecArr = [2][]byte{}
	ss.out = ss.out[:0]
	return err
}
