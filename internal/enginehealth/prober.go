// Package enginehealth probes workers' health endpoints (GET /health, which
// vLLM, SGLang and the simulated engine serve) when the routing decision
// core says a probe is due, and reports what it found back to the core,
// which marks workers down and up. The schedule, with its back-off for
// down workers, is the core's; this package owns the sockets.
package enginehealth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"syscall"
	"time"

	"kvrouter/internal/router"
)

// Path is the engines' health endpoint: vLLM and SGLang answer 200 while
// they serve, vLLM 503 once its engine died.
const Path = "/health"

// Defaults for a zero Prober.
const (
	DefaultTimeout = time.Second
	// DefaultEvery is how often due probes are looked for: a probe is
	// late by up to this much.
	DefaultEvery = 50 * time.Millisecond
)

// Prober runs the probes the router schedules.
type Prober struct {
	Router *router.Router
	Client *http.Client
	// Timeout bounds one probe.
	Timeout time.Duration
	Every   time.Duration
	Log     *slog.Logger
	Now     func() time.Time

	mu       sync.Mutex
	inflight map[string]bool
}

// Run probes until ctx ends, and waits for the probes in flight.
func (p *Prober) Run(ctx context.Context) {
	every := p.Every
	if every <= 0 {
		every = DefaultEvery
	}
	p.inflight = map[string]bool{}
	var wg sync.WaitGroup
	defer wg.Wait()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, pr := range p.Router.ProbesDue(p.Now()) {
			p.mu.Lock()
			busy := p.inflight[pr.Worker]
			p.inflight[pr.Worker] = true
			p.mu.Unlock()
			if busy {
				continue
			}
			wg.Go(func() {
				defer func() {
					p.mu.Lock()
					delete(p.inflight, pr.Worker)
					p.mu.Unlock()
				}()
				o, reason := Check(ctx, p.Client, pr.URL, p.timeout())
				if ctx.Err() != nil {
					return // the router is stopping: no verdict on the worker
				}
				switch p.Router.ReportProbe(pr.Worker, pr.URL, o, reason, p.Now()) {
				case router.WentDown:
					p.Log.Warn("worker down: its health probes fail; no request goes to it until it answers",
						"worker", pr.Worker, "url", pr.URL, "reason", reason)
				case router.CameUp:
					p.Log.Info("worker up: it answers its health probe again", "worker", pr.Worker, "url", pr.URL)
				}
			})
		}
	}
}

func (p *Prober) timeout() time.Duration {
	if p.Timeout > 0 {
		return p.Timeout
	}
	return DefaultTimeout
}

// Check probes the health endpoint of the engine at base once. Any answer
// but a 5xx counts as alive: an engine (or a proxy in front of it) without
// a health endpoint answers 404, and its HTTP server is what requests need.
func Check(ctx context.Context, c *http.Client, base string, timeout time.Duration) (router.ProbeOutcome, string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+Path, nil)
	if err != nil {
		return router.ProbeFailed, err.Error()
	}
	resp, err := c.Do(req)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return router.ProbeRefused, fmt.Sprintf("GET %s: connection refused", Path)
	case err != nil:
		return router.ProbeFailed, fmt.Sprintf("GET %s: %v", Path, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode >= 500 {
		return router.ProbeFailed, fmt.Sprintf("GET %s: %s", Path, resp.Status)
	}
	return router.ProbeOK, ""
}
