// This file holds the reading of an engine's HTTP/1.1 answer: its head, and its body's framing.

package upstream

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
)

// ErrMalformed marks an answer from an engine that is not HTTP/1.1 this
// client can read; the connection it came on is closed.
var ErrMalformed = errors.New("malformed HTTP response from the engine")

// maxHead bounds a response's status line and header fields, as net/http's
// default MaxResponseHeaderBytes does.
const maxHead = 1 << 20

// head is a response's status line and header fields, and how its body is
// framed.
type head struct {
	status  int
	header  http.Header
	length  int64 // -1 when the body runs until the connection closes
	chunked bool
	// keep says the connection may carry another request once the body is
	// read through.
	keep   bool
	http10 bool
}

// readHead reads one response head. noBody says the request cannot have a
// body in answer (HEAD). Informational (1xx) answers are skipped.
func readHead(r *bufio.Reader, noBody bool) (head, error) {
	budget := maxHead
	for {
		h, err := readOneHead(r, &budget)
		if err != nil {
			return h, err
		}
		if h.status >= 200 || h.status == http.StatusSwitchingProtocols {
			// 101 would hand the connection over: refused below.
			return h, frame(&h, noBody)
		}
	}
}

// readOneHead reads a status line and header fields up to the blank line.
func readOneHead(r *bufio.Reader, budget *int) (head, error) {
	h := head{length: -1}
	line, err := readLine(r, budget)
	if err != nil {
		return h, err
	}
	// "HTTP/1.1 200 OK"; the reason phrase may be empty or missing.
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || (line[7] != '0' && line[7] != '1') ||
		line[8] != ' ' || (len(line) > 12 && line[12] != ' ') {
		return h, fmt.Errorf("%w: status line %q", ErrMalformed, clip(line))
	}
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return h, fmt.Errorf("%w: status line %q", ErrMalformed, clip(line))
		}
		h.status = h.status*10 + int(c-'0')
	}
	if h.status < 100 {
		return h, fmt.Errorf("%w: status %d", ErrMalformed, h.status)
	}
	h.http10 = line[7] == '0'
	h.keep = !h.http10 // HTTP/1.0 closes unless it says otherwise
	h.header = make(http.Header, 8)
	for {
		line, err := readLine(r, budget)
		if err != nil {
			return h, err
		}
		if len(line) == 0 {
			return h, nil
		}
		if line[0] == ' ' || line[0] == '\t' {
			// Obsolete line folding (RFC 9112 5.2): refused, not guessed.
			return h, fmt.Errorf("%w: folded header line %q", ErrMalformed, clip(line))
		}
		name, value, ok := field(line)
		if !ok {
			return h, fmt.Errorf("%w: header line %q", ErrMalformed, clip(line))
		}
		key := canonicalKey(name)
		h.header[key] = append(h.header[key], string(bytes.TrimSpace(value)))
	}
}

// frame reads how the body is delimited (RFC 9112 6.3).
func frame(h *head, noBody bool) error {
	if h.status == http.StatusSwitchingProtocols {
		return fmt.Errorf("%w: the engine switched protocols", ErrMalformed)
	}
	for _, v := range h.header["Connection"] {
		for v != "" {
			var t string
			t, v, _ = strings.Cut(v, ",")
			switch t = strings.TrimSpace(t); {
			case strings.EqualFold(t, "close"):
				h.keep = false
			case strings.EqualFold(t, "keep-alive"):
				h.keep = true
			}
		}
	}
	if noBody || h.status == http.StatusNoContent || h.status == http.StatusNotModified {
		h.length = 0
		return nil
	}
	if te := h.header["Transfer-Encoding"]; len(te) > 0 {
		if h.http10 {
			return fmt.Errorf("%w: Transfer-Encoding in an HTTP/1.0 response", ErrMalformed)
		}
		if len(te) != 1 || !strings.EqualFold(te[0], "chunked") {
			return fmt.Errorf("%w: Transfer-Encoding %q: only chunked is read", ErrMalformed, te)
		}
		h.chunked = true
		// A length beside chunked is ignored, and the connection not
		// trusted with another request.
		if _, both := h.header["Content-Length"]; both {
			delete(h.header, "Content-Length")
			h.keep = false
		}
		return nil
	}
	if cl := h.header["Content-Length"]; len(cl) > 0 {
		for _, v := range cl[1:] {
			if v != cl[0] {
				return fmt.Errorf("%w: conflicting Content-Length %q", ErrMalformed, cl)
			}
		}
		n, err := strconv.ParseUint(cl[0], 10, 63)
		if err != nil {
			return fmt.Errorf("%w: Content-Length %q", ErrMalformed, cl[0])
		}
		h.length = int64(n)
		return nil
	}
	h.keep = false // the body ends when the connection does
	return nil
}

// readLine reads one CRLF- (or LF-) terminated line within the budget,
// without the terminator. The slice is valid until the next read.
func readLine(r *bufio.Reader, budget *int) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return nil, fmt.Errorf("%w: a header line longer than %d bytes", ErrMalformed, r.Size())
	}
	if err != nil {
		if err == io.EOF && len(line) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if *budget -= len(line); *budget < 0 {
		return nil, fmt.Errorf("%w: header fields over %d bytes", ErrMalformed, maxHead)
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// field splits a header or trailer line into a valid name and value.
func field(line []byte) (name, value []byte, ok bool) {
	name, value, ok = bytes.Cut(line, []byte(":"))
	return name, value, ok && validName(name) && validValue(value)
}

// validName reports whether a header name is a nonempty RFC 9110 token.
func validName[S string | []byte](name S) bool {
	if len(name) == 0 {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !tokenByte[name[i]] {
			return false
		}
	}
	return true
}

// tokenByte says which bytes may make up a token.
var tokenByte = func() (t [256]bool) {
	for c := '!'; c <= '~'; c++ {
		t[c] = !strings.ContainsRune(`"(),/:;<=>?@[\]{}`, c)
	}
	return t
}()

// validValue reports whether a header value holds no control character
// but tabs.
func validValue(b []byte) bool {
	for _, c := range b {
		if (c < ' ' && c != '\t') || c == 0x7F {
			return false
		}
	}
	return true
}

// common are the names engines send on every answer: looked up rather
// than allocated per response.
var common = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"Content-Type", "Content-Length", "Date", "Server", "Transfer-Encoding",
		"Connection", "Keep-Alive", "X-Request-Id", "Cache-Control"} {
		m[k] = k
	}
	return m
}()

func canonicalKey(name []byte) string {
	if k, ok := common[string(name)]; ok { // no allocation for the lookup
		return k
	}
	return textproto.CanonicalMIMEHeaderKey(string(name))
}

// clip shortens what an error quotes from the wire.
func clip(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// newBody returns the body h frames on r; done is called once, when it
// ends or is closed (at once for a body known to be empty).
func newBody(r *bufio.Reader, h head, done func(reusable bool)) *body {
	b := &body{r: r, left: h.length, chunked: h.chunked, first: true, done: done}
	switch {
	case h.chunked:
		b.left = 0 // in the current chunk: none read yet
	case h.length == 0:
		b.eof = true
		b.finish(true)
	}
	return b
}

// body reads a response's body off its connection and hands the connection
// back (done) once it is read through, or closes it.
type body struct {
	r       *bufio.Reader
	left    int64 // in the body or the current chunk; -1 until the connection closes
	chunked bool
	first   bool // no chunk read yet
	eof     bool
	err     error
	done    func(reusable bool) // called once, when the body ends or is closed
}

func (b *body) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.eof {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	if b.chunked && b.left == 0 {
		if err := b.nextChunk(); err != nil {
			return 0, b.fail(err)
		}
		if b.eof {
			b.finish(true)
			return 0, io.EOF
		}
	}
	if b.left >= 0 && int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	if b.left >= 0 {
		b.left -= int64(n)
	}
	switch {
	case b.left < 0 && err == io.EOF:
		// Delimited by the connection's end.
		b.eof = true
		b.finish(false)
		return n, io.EOF
	case err == io.EOF:
		return n, b.fail(io.ErrUnexpectedEOF)
	case err != nil:
		return n, b.fail(err)
	case b.left == 0 && !b.chunked:
		b.eof = true
		b.finish(true)
		return n, io.EOF
	}
	return n, nil
}

// nextChunk reads the CRLF closing the previous chunk and the next chunk's
// size line; the last chunk's trailers are read and dropped.
func (b *body) nextChunk() error {
	budget := maxHead
	if !b.first {
		crlf, err := b.r.Peek(2)
		if err != nil {
			return unexpected(err)
		}
		if crlf[0] != '\r' || crlf[1] != '\n' {
			return fmt.Errorf("%w: chunk longer than its size", ErrMalformed)
		}
		b.r.Discard(2)
	}
	b.first = false
	line, err := chunkLine(b.r, &budget)
	if err != nil {
		return err
	}
	size, _, _ := bytes.Cut(line, []byte(";")) // extensions are ignored
	size = bytes.TrimRight(size, " \t")
	n, err := strconv.ParseUint(string(size), 16, 62)
	if err != nil || len(size) == 0 {
		return fmt.Errorf("%w: chunk size %q", ErrMalformed, clip(line))
	}
	if n > 0 {
		b.left = int64(n)
		return nil
	}
	for { // trailers
		line, err := chunkLine(b.r, &budget)
		if err != nil {
			return err
		}
		if len(line) == 0 {
			b.eof = true
			return nil
		}
		// Dropped, but only well-formed.
		if _, _, ok := field(line); !ok {
			return fmt.Errorf("%w: trailer line %q", ErrMalformed, clip(line))
		}
	}
}

// chunkLine reads a line of the chunked framing, which must end in CRLF: a
// bare LF there is how request smuggling starts.
func chunkLine(r *bufio.Reader, budget *int) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("%w: a chunk line longer than %d bytes", ErrMalformed, r.Size())
		}
		return nil, unexpected(err)
	}
	if *budget -= len(line); *budget < 0 {
		return nil, fmt.Errorf("%w: chunk lines over %d bytes", ErrMalformed, maxHead)
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("%w: chunk line %q ends with a bare LF", ErrMalformed, clip(line))
	}
	return line[:len(line)-2], nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

func (b *body) fail(err error) error {
	b.err = err
	b.finish(false)
	return err
}

func (b *body) finish(reusable bool) {
	if b.done != nil {
		done := b.done
		b.done = nil
		done(reusable)
	}
}

// Close ends the body; a connection whose body was not read through is
// closed rather than drained.
func (b *body) Close() error {
	if b.err == nil && !b.eof {
		b.err = errClosed
	}
	b.finish(false)
	return nil
}

var errClosed = errors.New("upstream: read on a closed response body")
