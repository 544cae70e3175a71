package enginehealth

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"kvrouter/internal/cost"
	"kvrouter/internal/router"
)

func TestCheck(t *testing.T) {
	refused := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
		return "http://" + l.Addr().String()
	}
	serve := func(h http.HandlerFunc) string {
		s := httptest.NewServer(h)
		t.Cleanup(s.Close)
		return s.URL
	}
	tests := []struct {
		name string
		url  string
		want router.ProbeOutcome
	}{
		{"200", serve(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != Path {
				w.WriteHeader(http.StatusNotFound)
			}
		}), router.ProbeOK},
		{"no health endpoint (404) is alive", serve(http.NotFound), router.ProbeOK},
		{"503: vLLM's dead engine", serve(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
		}), router.ProbeFailed},
		{"no answer in time", serve(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }), router.ProbeFailed},
		{"nothing listens", refused(), router.ProbeRefused},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, reason := Check(context.Background(), http.DefaultClient, tc.url, 200*time.Millisecond)
			if got != tc.want || (got == router.ProbeOK) != (reason == "") {
				t.Fatalf("outcome %v (%q), want %v", got, reason, tc.want)
			}
		})
	}
}

// TestProberBringsWorkerBack: a worker marked down is probed until it
// answers, then chosen again.
func TestProberBringsWorkerBack(t *testing.T) {
	var healthy atomic.Bool
	var probes atomic.Int64
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		probes.Add(1)
		if !healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer s.Close()
	r, err := router.New(router.Config{Weights: cost.DefaultWeights(), NoHints: true,
		Health: router.HealthConfig{Backoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	w := router.Worker{ID: "w", Model: "m", URL: s.URL, Engine: router.EngineVLLM, BlockSize: 4, DPSize: 1}
	if err := r.Upsert(w, time.Now()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	p := &Prober{Router: r, Client: http.DefaultClient, Every: 5 * time.Millisecond, Now: time.Now,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	go func() { p.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	if r.ReportRefused("w", s.URL, "refused", time.Now()) != router.WentDown {
		t.Fatal("not marked down")
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	wait("probes of the down worker", func() bool { return probes.Load() >= 3 })
	if !r.Down("w") {
		t.Fatal("a failing worker came back")
	}
	healthy.Store(true)
	wait("the worker to come back", func() bool { return !r.Down("w") })
	if _, err := r.Decide(router.Request{Model: "m", Tokens: []uint32{1, 2, 3, 4}}); err != nil {
		t.Fatalf("decision after it came back: %v", err)
	}
	// Up workers are not probed without an interval.
	n := probes.Load()
	time.Sleep(50 * time.Millisecond)
	if m := probes.Load(); m > n+1 {
		t.Fatalf("%d probes of an up worker without an interval", m-n)
	}
}
