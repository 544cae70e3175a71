package upstream

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// echo answers with the request's method, path, Host, a header and body,
// counting the connections it was asked on.
func echo(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var conns atomic.Int64
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Seen", r.Header.Get("X-Test"))
		io.WriteString(w, r.Method+" "+r.URL.Path+" "+r.Host+" "+string(b))
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s, &conns
}

func do(t *testing.T, c *Client, req *Request) (*Response, string) {
	t.Helper()
	resp, err := c.Do(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func TestDoReusesConnections(t *testing.T) {
	s, conns := echo(t)
	c := &Client{}
	defer c.CloseIdle()
	for i := range 5 {
		resp, got := do(t, c, &Request{URL: s.URL + "/base", Path: "/v1/completions", Body: []byte("prompt"),
			Header: http.Header{"X-Test": {"yes"}, "Content-Length": {"999"}}})
		host := strings.TrimPrefix(s.URL, "http://")
		if want := "POST /base/v1/completions " + host + " prompt"; got != want || resp.StatusCode != 200 || resp.Header.Get("X-Seen") != "yes" {
			t.Fatalf("request %d: %d %q %v, want %q", i, resp.StatusCode, got, resp.Header, want)
		}
		if resp.ContentLength != int64(len(got)) || resp.Sent.IsZero() {
			t.Fatalf("ContentLength %d, Sent %v", resp.ContentLength, resp.Sent)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for 5 sequential requests, want 1", n)
	}
}

// TestUnreadBodyClosesConnection: a body closed before its end takes its
// connection with it rather than leaving the next answer behind the rest.
func TestUnreadBodyClosesConnection(t *testing.T) {
	s, conns := echo(t)
	c := &Client{}
	defer c.CloseIdle()
	resp, err := c.Do(context.Background(), &Request{URL: s.URL, Path: "/", Body: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, err := resp.Body.Read(make([]byte, 1)); err == nil {
		t.Fatal("read after Close succeeded")
	}
	do(t, c, &Request{URL: s.URL, Path: "/"})
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

// TestStreaming: a chunked answer's parts reach the reader as the engine
// flushes them, not at its end.
func TestStreaming(t *testing.T) {
	next := make(chan struct{})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			io.WriteString(w, "data: "+string(rune('a'+i))+"\n\n")
			w.(http.Flusher).Flush()
			<-next
		}
	}))
	defer s.Close()
	c := &Client{}
	defer c.CloseIdle()
	resp, err := c.Do(context.Background(), &Request{URL: s.URL, Path: "/stream"})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ContentLength != -1 {
		t.Fatalf("ContentLength %d for a chunked body", resp.ContentLength)
	}
	r := bufio.NewReader(resp.Body)
	for i := range 3 {
		line, err := r.ReadString('\n')
		if want := "data: " + string(rune('a'+i)) + "\n"; err != nil || line != want {
			t.Fatalf("event %d: %q %v, want %q", i, line, err, want)
		}
		r.ReadString('\n')
		next <- struct{}{}
	}
	if rest, err := io.ReadAll(r); err != nil || len(rest) != 0 {
		t.Fatalf("after the events: %q %v", rest, err)
	}
}

// TestCancel: cancelling the context ends a read that waits on the engine
// and closes the connection.
func TestCancel(t *testing.T) {
	release := make(chan struct{})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		<-release
	}))
	defer s.Close()
	defer close(release) // before Close, which waits for the handler
	c := &Client{}
	defer c.CloseIdle()
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := c.Do(ctx, &Request{URL: s.URL, Path: "/"})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 64)
	if _, err := resp.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := resp.Body.Read(buf); done <- err }()
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("read after cancel succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancel did not end the read")
	}
	if _, err := c.Do(ctx, &Request{URL: s.URL, Path: "/"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Do on a cancelled context: %v", err)
	}
}

// TestRefused: a refused connection is reported as such, for the router
// to try another worker.
func TestRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = (&Client{}).Do(context.Background(), &Request{URL: "http://" + addr, Path: "/"})
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("err %v, want ECONNREFUSED", err)
	}
	// Nothing was sent: the request may go elsewhere.
	if !errors.Is(err, ErrNoAnswer) {
		t.Fatalf("err %v, want ErrNoAnswer", err)
	}
}

// rawServer serves each connection with serve, counting requests.
func rawServer(t *testing.T, serve func(c net.Conn, r *bufio.Reader, conn int)) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for i := 0; ; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				serve(c, bufio.NewReader(c), i)
			})
		}
	})
	return "http://" + ln.Addr().String()
}

// readRequest reads one request off r, its body through.
func readRequest(r *bufio.Reader) (*http.Request, error) {
	req, err := http.ReadRequest(r)
	if err != nil {
		return nil, err
	}
	_, err = io.ReadAll(req.Body)
	return req, err
}

// TestStaleRetry: an engine that closed a connection while it sat idle
// costs no error: the request goes again on a new connection, once.
func TestStaleRetry(t *testing.T) {
	var served atomic.Int64
	url := rawServer(t, func(c net.Conn, r *bufio.Reader, _ int) {
		if _, err := readRequest(r); err != nil {
			return
		}
		served.Add(1)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		// Then close it, as an engine's keep-alive timeout does, but
		// without the client hearing of it before it sends again.
	})
	c := &Client{}
	defer c.CloseIdle()
	for i := range 3 {
		if _, got := do(t, c, &Request{URL: url, Path: "/"}); got != "ok" {
			t.Fatalf("request %d: %q", i, got)
		}
	}
	if n := served.Load(); n != 3 {
		t.Fatalf("engine served %d requests, want 3", n)
	}
	if n := c.Resent(); n != 2 {
		t.Fatalf("Resent %d, want 2 (the second and third requests met closed connections)", n)
	}
}

// TestNoRetryOnFreshConnection: a new connection that breaks is an error,
// not a loop.
func TestNoRetryOnFreshConnection(t *testing.T) {
	var conns atomic.Int64
	url := rawServer(t, func(c net.Conn, r *bufio.Reader, _ int) {
		conns.Add(1)
		readRequest(r)
	})
	c := &Client{}
	_, err := c.Do(context.Background(), &Request{URL: url, Path: "/"})
	if !errors.Is(err, ErrNoAnswer) || conns.Load() != 1 || c.Resent() != 0 {
		t.Fatalf("err %v after %d connections; want ErrNoAnswer after 1", err, conns.Load())
	}
}

// TestNoAnswer: ErrNoAnswer marks exactly the failures before the first
// byte of an answer.
func TestNoAnswer(t *testing.T) {
	tests := []struct {
		name   string
		answer string // written before the connection closes
		want   bool
	}{
		{"closed without answering", "", true},
		{"closed within the status line", "HTTP/1.1 2", false},
		{"closed within the head", "HTTP/1.1 200 OK\r\nContent-Le", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			url := rawServer(t, func(c net.Conn, r *bufio.Reader, _ int) {
				readRequest(r)
				io.WriteString(c, tc.answer)
				// A reset rather than a close where the kernel allows.
				if tcp, ok := c.(*net.TCPConn); ok {
					tcp.SetLinger(0)
				}
			})
			_, err := (&Client{}).Do(context.Background(), &Request{URL: url, Path: "/"})
			if err == nil || errors.Is(err, ErrNoAnswer) != tc.want {
				t.Fatalf("err %v; want ErrNoAnswer: %v", err, tc.want)
			}
		})
	}
}

// TestIdleTimeout: a connection idle longer than IdleTimeout is not reused.
func TestIdleTimeout(t *testing.T) {
	s, conns := echo(t)
	now := time.Unix(1000, 0)
	c := &Client{IdleTimeout: time.Second, Now: func() time.Time { return now }}
	defer c.CloseIdle()
	do(t, c, &Request{URL: s.URL, Path: "/"})
	now = now.Add(500 * time.Millisecond)
	do(t, c, &Request{URL: s.URL, Path: "/"})
	now = now.Add(2 * time.Second)
	do(t, c, &Request{URL: s.URL, Path: "/"})
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2 (one reused within the timeout, one after)", n)
	}
}

func TestTLS(t *testing.T) {
	s := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "secure "+r.Proto)
	}))
	defer s.Close()
	pool := x509.NewCertPool()
	pool.AddCert(s.Certificate())
	c := &Client{TLS: &tls.Config{RootCAs: pool}}
	defer c.CloseIdle()
	if _, got := do(t, c, &Request{URL: s.URL, Path: "/"}); got != "secure HTTP/1.1" {
		t.Fatalf("got %q", got)
	}
	if _, err := (&Client{}).Do(context.Background(), &Request{URL: s.URL, Path: "/"}); err == nil {
		t.Fatal("an untrusted certificate was accepted")
	}
}

func TestBadRequests(t *testing.T) {
	c := &Client{}
	for _, req := range []*Request{
		{URL: "ftp://h", Path: "/"},
		{URL: "http://", Path: "/"},
		{URL: "http://h:1?x=1", Path: "/"},
		{URL: "http://127.0.0.1:1", Path: "v1"},
		{URL: "http://127.0.0.1:1", Path: "/", Header: http.Header{"X-A": {"1\r\nX-Injected: 1"}}},
		{URL: "http://127.0.0.1:1", Path: "/", Header: http.Header{"X A": {"1"}}},
	} {
		if _, err := c.Do(context.Background(), req); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%+v: err %v, want ErrBadRequest", req, err)
		}
	}
}

// TestLargeBody: a body past the write buffer goes out in one vectored
// write, whole.
func TestLargeBody(t *testing.T) {
	s, _ := echo(t)
	c := &Client{}
	defer c.CloseIdle()
	big := strings.Repeat("0123456789", 20_000)
	if _, got := do(t, c, &Request{URL: s.URL, Path: "/", Body: []byte(big)}); !strings.HasSuffix(got, " "+big) {
		t.Fatalf("echo of a 200 KB body: %d bytes", len(got))
	}
}
