// This file holds TCPTransport: pulls from peers' Servers over pooled, verified TCP connections.

package runner

import (
	"context"
	"crypto/hmac"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"sync"
	"time"

	"github.com/zeebo/xxh3"
)

// TCP transport defaults.
const (
	DefaultMaxKeysPerFetch = 4096
	DefaultMaxIdlePerPeer  = 2
	DefaultDialTimeout     = 1000 * time.Millisecond
	DefaultIOTimeout       = 5000 * time.Millisecond
	DefaultMaxConns        = 256

	// DefaultHandshakeTimeout is DefaultDialTimeout: a client that has not
	// finished the handshake by then has given up on it itself, so the
	// slot serves nobody. It is what a stranger that connects and sends
	// nothing holds a slot for.
	DefaultHandshakeTimeout = DefaultDialTimeout
	// DefaultIdleTimeout is how long an authenticated connection may wait
	// for its next FETCH. Clients keep a couple of idle connections per
	// peer only to skip a dial and handshake (one round trip and two
	// HMACs, well under a millisecond in a data centre) on the next pull;
	// 30 s still reuses them across a steady stream of hinted requests,
	// while a peer gone quiet, or a member that opens connections and
	// leaves them, gives its slots back in seconds rather than minutes. A
	// client whose idle connection was closed redials once, transparently.
	DefaultIdleTimeout = 30 * time.Second
	// defaultClientShare: MaxConnsPerClient defaults to MaxConns divided
	// by this (64 of 256), so no one address can hold every slot, while a
	// host's runners (two idle connections each to a peer, plus the pulls
	// in flight) have room to spare.
	defaultClientShare = 4

	// slowLinkBytesPerSec is the rate FetchTimeout's default allows a FETCH
	// of the most keys: 1 Gbit/s, below any data-center link runners pull
	// over and below the 4.6–9.2 Gbit/s pulls reached in the routing
	// benchmarks on a busy host, so an honest transfer is not cut short.
	slowLinkBytesPerSec = 125_000_000
)

// TCPConfig configures both ends of the TCP peer protocol (see wire.go).
type TCPConfig struct {
	// BlockBytes must equal the runner's and every peer's.
	BlockBytes int
	// Secret, when set, must be shared by every member of the deployment:
	// connections prove it with an HMAC challenge both ways, so only
	// members can pull blocks, and only from members. Empty disables it;
	// a member with a secret refuses a peer without one.
	Secret []byte
	// SocketBuffer sets SO_SNDBUF and SO_RCVBUF; 0 leaves the kernel's
	// autotuning (the better choice on Linux when tcp_rmem's maximum is
	// large, as setting a size turns autotuning off).
	SocketBuffer int
	// Client side.
	MaxIdlePerPeer int           // idle connections kept per peer (default 2)
	DialTimeout    time.Duration // connect + handshake bound (default 1 s), within the fetch deadline
	// Server side.
	MaxKeysPerFetch int           // most keys one FETCH frame may name (default 4096)
	IOTimeout       time.Duration // per-block write bound (default 5 s): caps how long a stalled reader pins one block
	// HandshakeTimeout bounds the handshake from accept to READY (default
	// DefaultHandshakeTimeout, 1 s): a connection that sends nothing is
	// closed then.
	HandshakeTimeout time.Duration
	IdleTimeout      time.Duration // an authenticated connection waiting this long for a FETCH is closed (default 30 s)
	MaxConns         int           // connections served at once (default 256)
	// MaxConnsPerClient bounds the connections from one client address
	// (an IPv4 address or an IPv6 /64) open at once (default MaxConns/4),
	// so that one client cannot hold every slot. Connections over either
	// limit get an ERROR frame (ErrPeerBusy) and are closed.
	MaxConnsPerClient int
	// FetchTimeout bounds one FETCH as a whole, from when it is read to its
	// END. IOTimeout bounds each block alone, so a peer reading just fast
	// enough (a block per IOTimeout) could keep a block pinned for as long
	// as it liked; at this deadline the server stops sending, drops its pin
	// and resets the connection, so the peer sees a failed fetch, never a
	// short one. 0 derives it from the limits, see defaultFetchTimeout;
	// negative is an error (there is no "unbounded": set a large value).
	FetchTimeout time.Duration
	Logger       *slog.Logger
}

func (c TCPConfig) withDefaults() (TCPConfig, error) {
	if c.BlockBytes <= 0 {
		return c, fmt.Errorf("%w: block bytes must be positive, got %d", ErrConfig, c.BlockBytes)
	}
	if c.BlockBytes > 1<<31-1-blockHeadLen {
		return c, fmt.Errorf("%w: block bytes %d exceeds a frame", ErrConfig, c.BlockBytes)
	}
	if c.MaxIdlePerPeer <= 0 {
		c.MaxIdlePerPeer = DefaultMaxIdlePerPeer
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.MaxKeysPerFetch <= 0 {
		c.MaxKeysPerFetch = DefaultMaxKeysPerFetch
	}
	if c.IOTimeout <= 0 {
		c.IOTimeout = DefaultIOTimeout
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.MaxConns <= 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.MaxConnsPerClient <= 0 {
		c.MaxConnsPerClient = max(1, c.MaxConns/defaultClientShare)
	}
	switch {
	case c.FetchTimeout < 0:
		return c, fmt.Errorf("%w: FetchTimeout %v is negative; set 0 for the default derived from MaxKeysPerFetch and BlockBytes, or a positive bound", ErrConfig, c.FetchTimeout)
	case c.FetchTimeout == 0:
		c.FetchTimeout = defaultFetchTimeout(c.MaxKeysPerFetch, c.BlockBytes, c.IOTimeout)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// defaultFetchTimeout is what a FETCH of maxKeys blocks of blockBytes
// should take on a slow link (slowLinkBytesPerSec), plus ioTimeout, the
// bound a single block already gets, as slack for a first block that waits
// on the socket. With the defaults and Qwen3-32B's 4 MiB blocks that is
// 4096 × 4 MiB at 1 Gbit/s + 5 s ≈ 142 s; with 1 KiB blocks ≈ 5 s. Honest
// clients end far sooner (a runner's Fetch closes its connection at its
// OperationTimeout), so this only bounds peers that hold blocks on purpose
// or by a bug. It saturates rather than overflow a Duration.
func defaultFetchTimeout(maxKeys, blockBytes int, ioTimeout time.Duration) time.Duration {
	// Per block first: blockBytes < 2^31, so this cannot overflow.
	perBlock := time.Duration(blockBytes) * time.Second / slowLinkBytesPerSec
	if perBlock > 0 && time.Duration(maxKeys) > (math.MaxInt64-ioTimeout)/perBlock {
		return math.MaxInt64
	}
	return ioTimeout + time.Duration(maxKeys)*perBlock
}

// TCPTransport pulls blocks from peers' Servers over TCP, keeping a few
// idle connections per peer for reuse.
type TCPTransport struct {
	cfg TCPConfig

	mu     sync.Mutex
	idle   map[string][]*peerConn
	closed bool
}

var _ Transport = (*TCPTransport)(nil)

// NewTCPTransport returns a transport for cfg.
func NewTCPTransport(cfg TCPConfig) (*TCPTransport, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &TCPTransport{cfg: cfg, idle: make(map[string][]*peerConn)}, nil
}

type peerConn struct {
	conn    net.Conn
	maxKeys int
	wbuf    []byte
	hdr     [headerLen + blockHeadLen]byte
}

// Pull implements Transport.
func (t *TCPTransport) Pull(ctx context.Context, source string, keys []uint64, rx Receiver) error {
	addr, err := parseEndpoint(source)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		pc, reused, err := t.get(ctx, addr)
		if err != nil {
			return err
		}
		answered, err := t.pull(ctx, pc, keys, rx)
		if err == nil {
			t.put(addr, pc)
			return nil
		}
		pc.conn.Close()
		err = ctxErr(ctx, err)
		// An idle connection the peer has since closed fails before any
		// answer; nothing reached rx, so one retry on a fresh one is safe.
		if reused && !answered && attempt == 0 && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
			continue
		}
		return err
	}
}

// ctxErr explains an I/O error by ctx when ctx has ended, or when the
// socket deadline taken from ctx fired a moment before ctx's own timer.
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%w (%v)", cerr, err)
	}
	if _, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w (%v)", context.DeadlineExceeded, err)
	}
	return err
}

var aLongTimeAgo = time.Unix(1, 0)

func (t *TCPTransport) pull(ctx context.Context, pc *peerConn, keys []uint64, rx Receiver) (answered bool, err error) {
	dl, _ := ctx.Deadline()
	pc.conn.SetDeadline(dl)
	// Cancellation interrupts a blocked read or write at once.
	stop := context.AfterFunc(ctx, func() { pc.conn.SetDeadline(aLongTimeAgo) })
	defer func() {
		if !stop() && err == nil {
			// The interrupt may land later: do not reuse this connection.
			err = ctx.Err()
		}
	}()
	var sumErr error
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), pc.maxKeys)]
		keys = keys[len(chunk):]
		pc.wbuf = appendFetch(pc.wbuf[:0], chunk)
		if _, err := pc.conn.Write(pc.wbuf); err != nil {
			return answered, fmt.Errorf("send fetch: %w", err)
		}
		a, err := readAnswers(pc.conn, &pc.hdr, chunk, t.cfg.BlockBytes, rx)
		answered = answered || a
		if errors.Is(err, ErrChecksum) {
			// The stream is still in step; keep the good blocks, report
			// the bad, and drop the connection afterwards.
			sumErr = err
			continue
		}
		if err != nil {
			return answered, err
		}
	}
	return answered, sumErr
}

// readAnswers reads one fetch's answers: a BLOCK or MISSING per key in
// order, then END. Blocks are read straight into rx's buffers and committed
// only once their checksum matches, which a verifier goroutine checks while
// the next block is read. A checksum mismatch does not stop the read
// (ErrChecksum is returned at the end); anything else does. Every block
// handed to the verifier is settled before readAnswers returns.
func readAnswers(r io.Reader, hdr *[headerLen + blockHeadLen]byte, keys []uint64, blockBytes int, rx Receiver) (answered bool, err error) {
	var v *verifier
	defer func() {
		if v != nil {
			if verr := v.wait(); err == nil {
				err = verr
			}
		}
	}()
	limits := clientLimits(blockBytes)
	for i := 0; i <= len(keys); i++ {
		if _, err := io.ReadFull(r, hdr[:headerLen]); err != nil {
			return answered, fmt.Errorf("read answer: %w", err)
		}
		answered = true
		h, err := parseHeader(hdr[:headerLen], limits)
		if err != nil {
			return answered, err
		}
		if h.typ == msgError {
			return answered, readPeerError(r, h.n)
		}
		if i == len(keys) {
			if h.typ != msgEnd {
				return answered, fmt.Errorf("%w: message type %d after the last answer, want END", ErrProtocol, h.typ)
			}
			return answered, nil
		}
		want := keys[i]
		switch h.typ {
		case msgMissing:
			if _, err := io.ReadFull(r, hdr[:8]); err != nil {
				return answered, fmt.Errorf("read missing: %w", err)
			}
			if got := binary.BigEndian.Uint64(hdr[:8]); got != want {
				return answered, fmt.Errorf("%w: answer for key %#x, asked for %#x", ErrProtocol, got, want)
			}
			rx.Missing(want)
		case msgBlock:
			if _, err := io.ReadFull(r, hdr[:blockHeadLen]); err != nil {
				return answered, fmt.Errorf("read block head: %w", err)
			}
			got, sum := binary.BigEndian.Uint64(hdr[:8]), binary.BigEndian.Uint64(hdr[8:16])
			if got != want {
				return answered, fmt.Errorf("%w: answer for key %#x, asked for %#x", ErrProtocol, got, want)
			}
			buf := rx.Buffer(want)
			if buf == nil {
				if _, err := io.CopyN(io.Discard, r, int64(blockBytes)); err != nil {
					return answered, fmt.Errorf("skip block %#x: %w", want, err)
				}
				continue
			}
			if _, err := io.ReadFull(r, buf); err != nil {
				rx.Abort(want)
				return answered, fmt.Errorf("read block %#x: %w", want, err)
			}
			if v == nil {
				v = startVerifier(rx)
			}
			v.jobs <- verifyJob{key: want, sum: sum, buf: buf}
		default:
			return answered, fmt.Errorf("%w: message type %d in answers", ErrProtocol, h.typ)
		}
	}
	panic("unreachable")
}

// verifier checks received blocks against their checksums on its own
// goroutine, so that hashing one block overlaps reading the next, and
// commits or aborts each. At most two blocks wait for it: one queued, one
// being hashed.
type verifier struct {
	rx   Receiver
	jobs chan verifyJob
	done chan error
}

type verifyJob struct {
	key, sum uint64
	buf      []byte
}

func startVerifier(rx Receiver) *verifier {
	v := &verifier{rx: rx, jobs: make(chan verifyJob, 1), done: make(chan error, 1)}
	go v.run()
	return v
}

func (v *verifier) run() {
	var err error
	for j := range v.jobs {
		if xxh3.Hash(j.buf) != j.sum {
			v.rx.Abort(j.key)
			err = fmt.Errorf("block %#x: %w", j.key, ErrChecksum)
			continue
		}
		v.rx.Commit(j.key, j.sum)
	}
	v.done <- err
}

// wait returns once every queued block is settled, with ErrChecksum if any
// failed.
func (v *verifier) wait() error {
	close(v.jobs)
	return <-v.done
}

func readPeerError(r io.Reader, n int) error {
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return fmt.Errorf("read peer error: %w", err)
	}
	pe, err := parseError(p)
	if err != nil {
		return err
	}
	return pe
}

func (t *TCPTransport) get(ctx context.Context, addr string) (pc *peerConn, reused bool, err error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, false, ErrClosed
	}
	if list := t.idle[addr]; len(list) > 0 {
		pc = list[len(list)-1]
		t.idle[addr] = list[:len(list)-1]
		t.mu.Unlock()
		return pc, true, nil
	}
	t.mu.Unlock()
	pc, err = t.dial(ctx, addr)
	return pc, false, err
}

func (t *TCPTransport) put(addr string, pc *peerConn) {
	pc.conn.SetDeadline(time.Time{})
	t.mu.Lock()
	if !t.closed && len(t.idle[addr]) < t.cfg.MaxIdlePerPeer {
		t.idle[addr] = append(t.idle[addr], pc)
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	pc.conn.Close()
}

// Close closes idle connections; connections in use close when their pull ends.
func (t *TCPTransport) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for addr, list := range t.idle {
		for _, pc := range list {
			pc.conn.Close()
		}
		delete(t.idle, addr)
	}
	return nil
}

func (t *TCPTransport) dial(ctx context.Context, addr string) (*peerConn, error) {
	ctx, cancel := context.WithTimeout(ctx, t.cfg.DialTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial peer: %w", err)
	}
	tuneConn(conn, t.cfg.SocketBuffer)
	dl, _ := ctx.Deadline()
	conn.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(aLongTimeAgo) })
	pc, err := t.handshake(conn, addr)
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("handshake with %s: %w", addr, ctxErr(ctx, err))
	}
	return pc, nil
}

func (t *TCPTransport) handshake(conn net.Conn, addr string) (*peerConn, error) {
	pc := &peerConn{conn: conn}
	cnonce := newNonce()
	pc.wbuf = append(appendHeader(pc.wbuf[:0], msgHello, nonceLen), cnonce[:]...)
	if _, err := conn.Write(pc.wbuf); err != nil {
		return nil, err
	}
	p, err := readFrame(conn, msgChallenge, t.cfg.BlockBytes)
	if err != nil {
		return nil, err
	}
	ch, err := parseChallenge(p)
	if err != nil {
		return nil, err
	}
	if ch.blockBytes != t.cfg.BlockBytes {
		return nil, fmt.Errorf("%w: peer %s serves %d-byte blocks, block bytes here is %d", ErrBlockSize, addr, ch.blockBytes, t.cfg.BlockBytes)
	}
	secret := t.cfg.Secret
	switch {
	case ch.auth && len(secret) == 0:
		return nil, fmt.Errorf("%w: peer %s requires a shared secret; set the runner secret option", ErrAuth, addr)
	case !ch.auth && len(secret) > 0:
		return nil, fmt.Errorf("%w: peer %s runs without a secret but this runner has one; set the same secret option on every member", ErrAuth, addr)
	}
	pc.wbuf = pc.wbuf[:0]
	if ch.auth {
		if want := handshakeMAC(secret, macLabelSrv, &cnonce, &ch.nonce); !hmac.Equal(want[:], ch.mac[:]) {
			return nil, fmt.Errorf("%w: peer %s does not know this runner's secret; check the secret option", ErrAuth, addr)
		}
		mac := handshakeMAC(secret, macLabelCli, &ch.nonce, &cnonce)
		pc.wbuf = append(appendHeader(pc.wbuf, msgAuth, macLen), mac[:]...)
	} else {
		pc.wbuf = appendHeader(pc.wbuf, msgAuth, 0)
	}
	if _, err := conn.Write(pc.wbuf); err != nil {
		return nil, err
	}
	if _, err := readFrame(conn, msgReady, t.cfg.BlockBytes); err != nil {
		return nil, err
	}
	pc.maxKeys = ch.maxKeys
	return pc, nil
}

// readFrame reads one small handshake frame of type want (or an ERROR).
func readFrame(r io.Reader, want uint8, blockBytes int) ([]byte, error) {
	var hb [headerLen]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return nil, err
	}
	h, err := parseHeader(hb[:], clientLimits(blockBytes))
	if err != nil {
		return nil, err
	}
	if h.typ == msgError {
		return nil, readPeerError(r, h.n)
	}
	if h.typ != want {
		return nil, fmt.Errorf("%w: message type %d, want %d", ErrProtocol, h.typ, want)
	}
	p := make([]byte, h.n)
	if _, err := io.ReadFull(r, p); err != nil {
		return nil, err
	}
	return p, nil
}

func tuneConn(conn net.Conn, size int) {
	tc, ok := conn.(*net.TCPConn)
	if !ok || size <= 0 {
		return
	}
	// Best effort: the kernel caps sizes at its own maximum.
	tc.SetReadBuffer(size)
	tc.SetWriteBuffer(size)
}
