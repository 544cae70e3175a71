// Package runnertest serves KV cache runners on fixed ports for tests of their probers: a runner stopped and started again on the same port is a runner restart.
package runnertest

import (
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"kvrouter/internal/runner"
)

// Runner is a KV cache runner serving its control endpoint on a port.
type Runner struct {
	R    *runner.Runner
	srv  *runner.Server
	done chan error
	once sync.Once
}

// Serve serves r (a new runner process, with its own start epoch, when
// nil) on port of 127.0.0.1 until Stop or the test's end. It waits up to
// 10 s for the port, which a runner stopped just before may still hold.
func Serve(t testing.TB, r *runner.Runner, port int) *Runner {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if r == nil {
		var err error
		if r, err = runner.New(runner.Config{BlockBytes: 64, Capacity: 4, Logger: quiet}); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := runner.NewServer(r, runner.TCPConfig{BlockBytes: 64, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if ln, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	tr := &Runner{R: r, srv: srv, done: make(chan error, 1)}
	go func() { tr.done <- srv.Serve(ln) }()
	t.Cleanup(tr.Stop)
	return tr
}

// Stop stops serving; a second call does nothing.
func (tr *Runner) Stop() {
	tr.once.Do(func() {
		tr.srv.Close()
		<-tr.done
	})
}

// FreePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
