// Package upstream is the router's HTTP/1.1 client to its engines: pooled
// keep-alive connections, a request written from the caller's goroutine in
// one write, and the answer read on it as well.
//
// net/http's Transport hands every request to a writer goroutine and every
// answer back from a reader goroutine; with a 10 KB prompt forwarded to a
// local engine those hand-offs, and the header maps and buffers around
// them, were an eighth of the router's CPU. This client does what the
// router needs and nothing else: HTTP/1.1 (and TLS) to engines, bodies
// framed by length, chunks or the connection's end, cancellation by
// context, and one retry of a request that met a connection the engine had
// closed while it sat idle.
package upstream

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for a zero Client.
const (
	DefaultDialTimeout = 5 * time.Second
	// DefaultIdleTimeout is below uvicorn's keep-alive timeout (5 s), which
	// vLLM and SGLang serve with: a connection idle longer may be closing
	// on the engine's side as a request goes out on it.
	DefaultIdleTimeout    = 4 * time.Second
	DefaultMaxIdlePerHost = 256
)

// ErrBadRequest marks a request this client refuses to send; the message
// names the field.
var ErrBadRequest = errors.New("upstream: bad request")

// ErrNoAnswer marks a request that got no byte of an answer: the engine
// could not be reached, or the connection broke (reset or closed by the
// engine) while the request was written or before the answer began. The engine may have started on it, but nobody
// saw any of its answer, so a request without side effects may be sent
// elsewhere.
var ErrNoAnswer = errors.New("no answer from the engine")

// Client sends requests to engines. Its zero value is ready to use; it is
// safe for concurrent use.
type Client struct {
	DialTimeout    time.Duration
	IdleTimeout    time.Duration
	MaxIdlePerHost int
	// TLS configures https targets (ServerName is set from the URL when
	// empty); nil uses the system's roots.
	TLS *tls.Config
	// Now is the clock for idle times; time.Now when nil.
	Now func() time.Time

	resent atomic.Uint64

	mu        sync.Mutex
	idle      map[string][]*conn // by target, most recently used last
	targets   map[string]*target // parsed base URLs
	lastSweep time.Time
}

// Request is one request to an engine.
type Request struct {
	Method string // POST when empty
	// URL is the engine's base URL (http or https, maybe with a path
	// prefix); Path is appended to it.
	URL, Path string
	// Header is written as given, but for the fields this client sets
	// itself: Host, Content-Length, Transfer-Encoding, Connection.
	Header http.Header
	Body   []byte
}

// Response is an engine's answer. Its Body must be closed; the connection
// goes back to the pool once the body was read to its end.
type Response struct {
	StatusCode int
	Header     http.Header
	// ContentLength is -1 when the body is chunked or runs until the
	// connection closes.
	ContentLength int64
	Body          io.ReadCloser
	// Sent is when the request was written.
	Sent time.Time
}

// target is a parsed base URL.
type target struct {
	tls  bool
	addr string // host:port to dial
	host string // the Host field
	name string // the TLS server name
	path string // prefix of every request path
	key  string // of its idle connections
}

type conn struct {
	c      net.Conn
	r      *bufio.Reader
	wbuf   []byte
	idleAt time.Time
}

func (c *Client) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Client) target(base string) (*target, error) {
	c.mu.Lock()
	t := c.targets[base]
	c.mu.Unlock()
	if t != nil {
		return t, nil
	}
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("%w: url %q: %v", ErrBadRequest, base, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%w: url %q: want http(s)://host[:port][/path]", ErrBadRequest, base)
	}
	t = &target{tls: u.Scheme == "https", host: u.Host, name: u.Hostname(), path: u.EscapedPath()}
	port := u.Port()
	if port == "" {
		port = "80"
		if t.tls {
			port = "443"
		}
	}
	t.addr = net.JoinHostPort(u.Hostname(), port)
	t.key = u.Scheme + "://" + t.addr + "/" + t.name
	c.mu.Lock()
	if c.targets == nil {
		c.targets = map[string]*target{}
	}
	if len(c.targets) > 4096 { // URLs come from the fleet: bounded in practice
		clear(c.targets)
	}
	c.targets[base] = t
	c.mu.Unlock()
	return t, nil
}

// Do sends req and reads the answer's head. Cancelling ctx ends the
// exchange, the body's reads included, and closes its connection.
func (c *Client) Do(ctx context.Context, req *Request) (*Response, error) {
	t, err := c.target(req.URL)
	if err != nil {
		return nil, err
	}
	if err := check(req); err != nil {
		return nil, err
	}
	method := req.Method
	if method == "" {
		method = http.MethodPost
	}
	for retry := false; ; retry = true {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// A retry dials: the other idle connections are likely as stale.
		var cn *conn
		if !retry {
			cn = c.get(t)
		}
		reused := cn != nil
		if cn == nil {
			if cn, err = c.dial(ctx, t); err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				// Nothing was sent: as safe to send elsewhere as a request
				// no byte of an answer came back for. A refused
				// connection still says so (syscall.ECONNREFUSED).
				return nil, fmt.Errorf("%s %s: %w: %w", method, t.addr, ErrNoAnswer, err)
			}
		}
		resp, err := c.exchange(ctx, cn, t, method, req)
		if err == nil {
			return resp, nil
		}
		var stale staleError
		if errors.As(err, &stale) {
			if reused && ctx.Err() == nil { // a retry is never reused
				// Nothing came back on a connection that sat idle: the
				// engine closed it meanwhile (or restarted, and never saw
				// the request). Sent once more, on a new connection.
				c.resent.Add(1)
				continue
			}
			err = fmt.Errorf("%w: %w", ErrNoAnswer, stale.err)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%s %s: %w", method, t.addr, err)
	}
}

// staleError is a failure before any byte of an answer came back on a
// connection: the engine had closed it, or never took the request.
type staleError struct{ err error }

func (e staleError) Error() string { return e.err.Error() }
func (e staleError) Unwrap() error { return e.err }

// exchange writes the request on cn and reads the answer's head; cn is
// closed unless the response body now owns it.
func (c *Client) exchange(ctx context.Context, cn *conn, t *target, method string, req *Request) (*Response, error) {
	// A cancelled context interrupts whatever read or write is under way.
	stop := context.AfterFunc(ctx, func() { cn.c.SetDeadline(time.Unix(1, 0)) })
	fail := func(err error) (*Response, error) {
		stop()
		cn.c.Close()
		return nil, err
	}
	var err error
	cn.wbuf = appendHead(cn.wbuf[:0], method, t, req)
	if len(cn.wbuf)+len(req.Body) <= 64<<10 {
		// Copied into the connection's buffer, which thus stays small: a
		// larger body leaves from where it is.
		cn.wbuf = append(cn.wbuf, req.Body...)
		_, err = cn.c.Write(cn.wbuf)
	} else {
		bufs := net.Buffers{cn.wbuf, req.Body}
		_, err = bufs.WriteTo(cn.c)
	}
	if err != nil {
		return fail(staleError{err})
	}
	sent := c.now()
	if _, err := cn.r.Peek(1); err != nil {
		return fail(staleError{err})
	}
	h, err := readHead(cn.r, method == http.MethodHead)
	if err != nil {
		return fail(unexpected(err))
	}
	resp := &Response{StatusCode: h.status, Header: h.header, ContentLength: -1, Sent: sent}
	if !h.chunked {
		resp.ContentLength = h.length
	}
	resp.Body = newBody(cn.r, h, func(reusable bool) {
		if !stop() || !reusable || !h.keep {
			// Cancelled meanwhile (its deadline may be set), unread, or
			// the engine is closing it.
			cn.c.Close()
			return
		}
		c.put(t, cn)
	})
	return resp, nil
}

// check refuses what appendHead must not write.
func check(req *Request) error {
	if req.Path == "" || req.Path[0] != '/' {
		return fmt.Errorf("%w: path %q must start with /", ErrBadRequest, req.Path)
	}
	for k, vs := range req.Header {
		if !validName(k) {
			return fmt.Errorf("%w: header name %q", ErrBadRequest, k)
		}
		for _, v := range vs {
			for i := 0; i < len(v); i++ {
				if c := v[i]; c == '\r' || c == '\n' || c == 0 {
					return fmt.Errorf("%w: header %s: value holds a line break or NUL", ErrBadRequest, k)
				}
			}
		}
	}
	return nil
}

// appendHead writes the request line and header fields of a checked
// request.
func appendHead(b []byte, method string, t *target, req *Request) []byte {
	b = append(b, method...)
	b = append(b, ' ')
	b = append(b, t.path...)
	b = append(b, req.Path...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, t.host...)
	b = append(b, "\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(req.Body)), 10)
	b = append(b, "\r\n"...)
	for k, vs := range req.Header {
		switch k {
		case "Host", "Content-Length", "Transfer-Encoding", "Connection":
			continue
		}
		for _, v := range vs {
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	return append(b, "\r\n"...)
}

func (c *Client) dial(ctx context.Context, t *target) (*conn, error) {
	timeout := c.DialTimeout
	if timeout <= 0 {
		timeout = DefaultDialTimeout
	}
	d := net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	nc, err := d.DialContext(ctx, "tcp", t.addr)
	if err != nil {
		return nil, err
	}
	if t.tls {
		cfg := &tls.Config{}
		if c.TLS != nil {
			cfg = c.TLS.Clone()
		}
		if cfg.ServerName == "" {
			cfg.ServerName = t.name
		}
		cfg.NextProtos = []string{"http/1.1"}
		tc := tls.Client(nc, cfg)
		hctx, cancel := context.WithTimeout(ctx, timeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("TLS with %s: %w", t.addr, err)
		}
		nc = tc
	}
	return &conn{c: nc, r: bufio.NewReaderSize(nc, 16<<10)}, nil
}

// get takes the most recently used idle connection to t that has not
// been idle too long.
func (c *Client) get(t *target) *conn {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.idle == nil {
		c.idle = map[string][]*conn{}
	}
	list := c.idle[t.key]
	for len(list) > 0 {
		cn := list[len(list)-1]
		list[len(list)-1] = nil
		list = list[:len(list)-1]
		if now.Sub(cn.idleAt) < c.idleTimeout() {
			c.idle[t.key] = list
			return cn
		}
		// The older ones are older still.
		for _, old := range list {
			old.c.Close()
		}
		cn.c.Close()
		clear(list)
		list = list[:0]
	}
	c.idle[t.key] = list
	return nil
}

func (c *Client) idleTimeout() time.Duration {
	if c.IdleTimeout > 0 {
		return c.IdleTimeout
	}
	return DefaultIdleTimeout
}

// put returns a connection whose answer was read through to the pool.
func (c *Client) put(t *target, cn *conn) {
	if cn.r.Buffered() > 0 {
		cn.c.Close() // the engine sent more than its answer
		return
	}
	now := c.now()
	cn.idleAt = now
	max := c.MaxIdlePerHost
	if max <= 0 {
		max = DefaultMaxIdlePerHost
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.idle == nil {
		c.idle = map[string][]*conn{}
	}
	if len(c.idle[t.key]) >= max {
		cn.c.Close()
		return
	}
	c.idle[t.key] = append(c.idle[t.key], cn)
	if now.Sub(c.lastSweep) > c.idleTimeout() {
		// Engines that left keep no connections open for long.
		c.lastSweep = now
		c.sweep(now)
	}
}

// sweep closes connections idle too long. Callers hold mu.
func (c *Client) sweep(now time.Time) {
	for key, list := range c.idle {
		keep := list[:0]
		for _, cn := range list {
			if now.Sub(cn.idleAt) < c.idleTimeout() {
				keep = append(keep, cn)
			} else {
				cn.c.Close()
			}
		}
		clear(list[len(keep):])
		if len(keep) == 0 {
			delete(c.idle, key)
		} else {
			c.idle[key] = keep
		}
	}
}

// Resent counts requests sent again because a pooled connection answered
// nothing: many mean the engines close idle connections sooner than
// IdleTimeout.
func (c *Client) Resent() uint64 { return c.resent.Load() }

// CloseIdle closes every idle connection.
func (c *Client) CloseIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, list := range c.idle {
		for _, cn := range list {
			cn.c.Close()
		}
	}
	clear(c.idle)
}
