package upstream

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// readAll reads one response off raw as the client does: the head, then
// the body through. reusable is what the body reported at its end.
func readAll(raw string, noBody bool) (h head, b []byte, reusable bool, err error) {
	r := bufio.NewReaderSize(strings.NewReader(raw), 64)
	if h, err = readHead(r, noBody); err != nil {
		return h, nil, false, err
	}
	b, err = io.ReadAll(newBody(r, h, func(ok bool) { reusable = ok && h.keep }))
	return h, b, reusable, err
}

func TestReadResponse(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		head      bool // a HEAD request's answer
		status    int
		body      string
		reusable  bool
		err       error // errors.Is; nil for none
	}{
		{name: "length", raw: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", status: 200, body: "hello", reusable: true},
		{name: "bare LF and no reason", raw: "HTTP/1.1 200\nContent-Length: 2\n\nhi", status: 200, body: "hi", reusable: true},
		{name: "chunked with extension and trailer", raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nX-T: 1\r\n\r\n",
			status: 200, body: "abcde", reusable: true},
		{name: "upper-case chunk size", raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\nA\r\n0123456789\r\n0\r\n\r\n", status: 200, body: "0123456789", reusable: true},
		{name: "continue skipped", raw: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n", status: 201, reusable: true},
		{name: "until close", raw: "HTTP/1.1 200 OK\r\n\r\nall of it", status: 200, body: "all of it"},
		{name: "connection close", raw: "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx", status: 200, body: "x"},
		{name: "1.0 closes", raw: "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx", status: 200, body: "x"},
		{name: "1.0 keep-alive", raw: "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 1\r\n\r\nx", status: 200, body: "x", reusable: true},
		{name: "no content", raw: "HTTP/1.1 204 No Content\r\n\r\n", status: 204, reusable: true},
		{name: "head", raw: "HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n", head: true, status: 200, reusable: true},
		{name: "length beside chunked", raw: "HTTP/1.1 200 OK\r\nContent-Length: 99\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nz\r\n0\r\n\r\n", status: 200, body: "z"},
		{name: "same length twice", raw: "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", status: 200, body: "x", reusable: true},

		{name: "conflicting lengths", raw: "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxy", err: ErrMalformed},
		{name: "negative length", raw: "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", err: ErrMalformed},
		{name: "gzip coding", raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", err: ErrMalformed},
		{name: "folded header", raw: "HTTP/1.1 200 OK\r\nX-A: 1\r\n 2\r\nContent-Length: 0\r\n\r\n", err: ErrMalformed},
		{name: "header without colon", raw: "HTTP/1.1 200 OK\r\nX-A 1\r\n\r\n", err: ErrMalformed},
		{name: "space in name", raw: "HTTP/1.1 200 OK\r\nX A: 1\r\n\r\n", err: ErrMalformed},
		{name: "not http", raw: "SSH-2.0-OpenSSH\r\n\r\n", err: ErrMalformed},
		{name: "http/2 status", raw: "HTTP/2 200 OK\r\n\r\n", err: ErrMalformed},
		{name: "short status", raw: "HTTP/1.1 20 OK\r\n\r\n", err: ErrMalformed},
		{name: "letters in status", raw: "HTTP/1.1 2x0 OK\r\n\r\n", err: ErrMalformed},
		{name: "switching protocols", raw: "HTTP/1.1 101 Switching Protocols\r\n\r\n", err: ErrMalformed},
		{name: "bad chunk size", raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", status: 200, err: ErrMalformed},
		{name: "chunk longer than its size", raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n0\r\n\r\n", status: 200, err: ErrMalformed},
		{name: "chunked cut off", raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", status: 200, err: io.ErrUnexpectedEOF},
		{name: "length cut off", raw: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab", status: 200, err: io.ErrUnexpectedEOF},
		{name: "head cut off", raw: "HTTP/1.1 200 OK\r\nContent-Len", err: io.ErrUnexpectedEOF},
		{name: "nothing", raw: "", err: io.EOF},
		{name: "header line too long", raw: "HTTP/1.1 200 OK\r\nX-A: " + strings.Repeat("a", 100) + "\r\n\r\n", err: ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, b, reusable, err := readAll(tc.raw, tc.head)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil || h.status != tc.status || string(b) != tc.body || reusable != tc.reusable {
				t.Fatalf("got %d %q reusable %v err %v; want %d %q reusable %v", h.status, b, reusable, err, tc.status, tc.body, tc.reusable)
			}
		})
	}
}

// TestHeadBudget: header fields are bounded in total, not only per line.
func TestHeadBudget(t *testing.T) {
	var sb strings.Builder
	sb.WriteString("HTTP/1.1 200 OK\r\n")
	for sb.Len() <= maxHead {
		sb.WriteString("X-Filler: " + strings.Repeat("f", 1000) + "\r\n")
	}
	sb.WriteString("\r\n")
	_, err := readHead(bufio.NewReaderSize(strings.NewReader(sb.String()), 4096), false)
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("err %v, want ErrMalformed", err)
	}
}

// FuzzReadResponse: whatever an engine sends, the reader neither panics
// nor hangs, and what it accepts net/http reads the same way (it is the
// stricter of the two).
func FuzzReadResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nX-T: 1\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.0 200 OK\r\n\r\nuntil close",
		"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\nf\r\ndata: {\"a\":1}\n\n\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxy",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		h, b, _, err := readAll(string(raw), false)
		if err != nil {
			return
		}
		br := bufio.NewReader(bytes.NewReader(raw))
		resp, herr := http.ReadResponse(br, nil)
		for herr == nil && resp.StatusCode < 200 { // as the Transport does
			resp, herr = http.ReadResponse(br, nil)
		}
		if herr != nil {
			t.Fatalf("accepted what net/http refuses (%v): %d %q", herr, h.status, b)
		}
		hb, herr := io.ReadAll(resp.Body)
		if herr != nil || resp.StatusCode != h.status || !bytes.Equal(hb, b) {
			t.Fatalf("read %d %q; net/http %d %q %v", h.status, b, resp.StatusCode, hb, herr)
		}
	})
}
