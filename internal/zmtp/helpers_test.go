package zmtp

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"kvrouter/internal/zmtp/zmtptest"
)

// waitLimit is a safety net against hangs, not a timing assertion.
const waitLimit = 10 * time.Second

// checkLeaks fails t if goroutines started during the test outlive it.
func checkLeaks(t *testing.T) {
	t.Helper()
	zmtptest.CheckLeaks(t)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newSocket makes a socket closed at the end of the test.
func newSocket(t testing.TB, typ Type, opt Options) *Socket {
	t.Helper()
	if opt.Logger == nil {
		opt.Logger = quiet()
	}
	s, err := New(typ, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// listen binds s on a free loopback port and returns the dialable endpoint.
func listen(t testing.TB, s *Socket) string {
	t.Helper()
	if err := s.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	return "tcp://" + s.Addr().String()
}

func recv(t testing.TB, s *Socket) Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	m, err := s.Recv(ctx)
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	return m
}

func send(t testing.TB, s *Socket, frames ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	b := make([][]byte, len(frames))
	for i, f := range frames {
		b[i] = []byte(f)
	}
	if err := s.Send(ctx, b); err != nil {
		t.Fatalf("Send: %v", err)
	}
}

func frameStrings(m Msg) []string {
	out := make([]string, len(m.Frames))
	for i, f := range m.Frames {
		out[i] = string(f)
	}
	return out
}

// waitFor polls cond; the limit is a safety net, not an assertion.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(waitLimit); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// rawDial opens a plain TCP connection for playing a peer byte by byte.
func rawDial(t testing.TB, ep string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(ep, schemeTCP), waitLimit)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(waitLimit))
	return c
}
