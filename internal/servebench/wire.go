// This file holds the HTTP/1.1 client and null engine that speak on the socket themselves.

package servebench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
)

// The load generator and the null engine share the router's two cores, so
// whatever they spend is taken from the router. They speak HTTP/1.1 on the
// wire themselves, as wrk or h2load would, rather than through net/http,
// whose client alone cost a fifth of a routed request's CPU. The router
// between them is untouched: its server is net/http's, its client to
// engines internal/upstream, as in service.

// errWire marks an answer this minimal HTTP/1.1 reader cannot take.
var errWire = errors.New("servebench: unexpected HTTP on the wire")

// wireConn is one keep-alive client connection.
type wireConn struct {
	addr string
	c    net.Conn
	r    *bufio.Reader
}

// post sends one prepared request (head and body in one slice) and reads
// the answer through, returning its status.
func (w *wireConn) post(req []byte) (int, error) {
	if w.c == nil {
		c, err := net.Dial("tcp", w.addr)
		if err != nil {
			return 0, err
		}
		w.c, w.r = c, bufio.NewReaderSize(c, 64<<10)
	}
	status, keep, err := w.roundTrip(req)
	if err != nil || !keep {
		w.close()
	}
	return status, err
}

func (w *wireConn) roundTrip(req []byte) (status int, keep bool, err error) {
	if _, err := w.c.Write(req); err != nil {
		return 0, false, err
	}
	line, err := w.r.ReadSlice('\n')
	if err != nil {
		return 0, false, err
	}
	// "HTTP/1.1 200 OK\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, false, fmt.Errorf("%w: status line %q", errWire, line)
	}
	if status, err = strconv.Atoi(string(line[9:12])); err != nil {
		return 0, false, fmt.Errorf("%w: status line %q", errWire, line)
	}
	h, err := readHead(w.r)
	if err != nil {
		return status, false, err
	}
	if h.length < 0 && !h.chunked {
		// A request without a length has no body; an answer would run to
		// the connection's end, which this reader does not follow.
		return status, false, fmt.Errorf("%w: an answer with neither Content-Length nor chunked", errWire)
	}
	if err := h.discardBody(w.r); err != nil {
		return status, false, err
	}
	return status, !h.close, nil
}

func (w *wireConn) close() {
	if w.c != nil {
		w.c.Close()
		w.c, w.r = nil, nil
	}
}

// head is what this reader needs of a message's header fields.
type head struct {
	length  int64 // -1: none given
	chunked bool
	close   bool
}

// readHead reads header fields up to the blank line.
func readHead(r *bufio.Reader) (head, error) {
	h := head{length: -1}
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return h, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			return h, nil
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return h, fmt.Errorf("%w: header line %q", errWire, line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || n < 0 {
				return h, fmt.Errorf("%w: Content-Length %q", errWire, value)
			}
			h.length = n
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			h.chunked = bytes.EqualFold(value, []byte("chunked"))
			if !h.chunked {
				return h, fmt.Errorf("%w: Transfer-Encoding %q", errWire, value)
			}
		case bytes.EqualFold(name, []byte("Connection")):
			h.close = bytes.EqualFold(value, []byte("close"))
		}
	}
}

// discardBody reads the message body through.
func (h head) discardBody(r *bufio.Reader) error {
	switch {
	case h.chunked:
		for {
			line, err := r.ReadSlice('\n')
			if err != nil {
				return err
			}
			size, _, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(";"))
			n, err := strconv.ParseInt(string(size), 16, 64)
			if err != nil || n < 0 {
				return fmt.Errorf("%w: chunk size %q", errWire, line)
			}
			if n == 0 {
				_, err := readHead(r) // trailers
				return err
			}
			if _, err := r.Discard(int(n)); err != nil {
				return err
			}
			if _, err := r.Discard(2); err != nil { // CRLF
				return err
			}
		}
	case h.length > 0:
		_, err := r.Discard(int(h.length))
		return err
	}
	return nil
}

// wireRequest is a POST of body to path on host, head and body in one
// slice so that it leaves in one write.
func wireRequest(host, path string, body []byte) []byte {
	head := "POST " + path + " HTTP/1.1\r\nHost: " + host + "\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n"
	return append([]byte(head), body...)
}

// nullEngine answers every request with nullCompletion at once.
type nullEngine struct {
	ln   net.Listener
	url  string
	hits atomic.Int64
	wg   sync.WaitGroup
	mu   sync.Mutex
	open map[net.Conn]bool
}

func startNullEngine() (*nullEngine, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("null engine: %w", err)
	}
	e := &nullEngine{ln: ln, url: "http://" + ln.Addr().String(), open: map[net.Conn]bool{}}
	answer := append([]byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "+
		strconv.Itoa(len(nullCompletion))+"\r\n\r\n"), nullCompletion...)
	e.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.mu.Lock()
			e.open[c] = true
			e.mu.Unlock()
			e.wg.Go(func() {
				defer func() {
					e.mu.Lock()
					delete(e.open, c)
					e.mu.Unlock()
					c.Close()
				}()
				e.serve(c, answer)
			})
		}
	})
	return e, nil
}

// serve answers the requests of one connection until it ends or sends
// something this reader does not take.
func (e *nullEngine) serve(c net.Conn, answer []byte) {
	r := bufio.NewReaderSize(c, 64<<10)
	for {
		line, err := r.ReadSlice('\n')
		if err != nil || !bytes.HasSuffix(bytes.TrimRight(line, "\r\n"), []byte(" HTTP/1.1")) {
			return
		}
		h, err := readHead(r)
		if err != nil || h.discardBody(r) != nil {
			return
		}
		e.hits.Add(1)
		if _, err := c.Write(answer); err != nil || h.close {
			return
		}
	}
}

func (e *nullEngine) close() {
	e.ln.Close()
	e.mu.Lock()
	for c := range e.open {
		c.Close()
	}
	e.mu.Unlock()
	e.wg.Wait()
}
