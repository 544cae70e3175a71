package serve

import (
	"context"
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
