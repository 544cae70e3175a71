package serve

import (
	"context"
	"net"
	"net/http"
	"runtime"
	"testing"
	"time"

	"kvrouter/internal/bus"
	"kvrouter/internal/direct"
	"kvrouter/internal/discovery"
)

// TestCloseLeavesNothing: every service a router starts (HTTP, discovery,
// ZMQ ingest in both modes, engine metrics, load sharing, housekeeping)
// stops with Close.
func TestCloseLeavesNothing(t *testing.T) {
	before := runtime.NumGoroutine()
	b, err := bus.Open(context.Background(), bus.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, testModel)
	o := Defaults()
	o.Listen, o.AdminListen, o.Bus, o.Log = "127.0.0.1:0", "127.0.0.1:0", b, quiet()
	o.Registry = discovery.NewMemory(time.Second, nil)
	o.Workers = []direct.WorkerSpec{spec(t, e, ",events="+freeTCP(t))}
	o.EventsBind = freeTCP(t)
	o.EngineMetricsInterval = 10 * time.Millisecond
	g, err := Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	waitWorkers(t, g, 1)
	if status, _, body := post(t, g.url(), "/v1/completions", completionBody(prompt(1, 2), "")); status != http.StatusOK {
		t.Fatalf("%d %s", status, body)
	}
	get(t, g.admin()+"/metrics")
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	e.srv.Close()
	http.DefaultClient.CloseIdleConnections()
	eventually(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
}

// TestCloseWithSilentConnections: a client connection that never sent a
// request (one opened as the service stops) does not hold the stop: the
// HTTP server counts such a connection idle only once it is 5 s old, and
// Close gives its servers 5 s, so without closing them Close reported the
// deadline passed.
func TestCloseWithSilentConnections(t *testing.T) {
	h := newHarness(t)
	e := newEngine(t, testModel)
	g := h.service(func(o *Options) { o.Workers = []direct.WorkerSpec{spec(t, e, "")} })
	waitWorkers(t, g, 1)
	var conns []net.Conn
	for _, addr := range []string{g.Addr, g.AdminAddr} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	// Both connections are accepted (StateNew) before the stop.
	eventually(t, "the connections to be accepted", func() bool {
		g.quiet.mu.Lock()
		defer g.quiet.mu.Unlock()
		return len(g.quiet.conns) == len(conns)
	})
	if err := g.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
			t.Fatalf("a silent connection survived the stop: %d, %v", n, err)
		}
	}
}
