// Package runnerprobe tells whether the KV cache runners that hold cache
// owners' inventory live and are the processes they were: it asks each
// runner's control endpoint for its start epoch (runner.Ping) every
// interval and turns the answers into ingest.Runner reports, against which
// the ingest core keeps, suspends or drops an owner's inventory. The state
// agent and serve's direct ingest (--worker ...,control=) drive it with
// the same flags, --runner-probe and --owner-ttl.
package runnerprobe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"kvrouter/internal/ingest"
	"kvrouter/internal/runner"
)

// Defaults of --runner-probe and --owner-ttl.
const (
	DefaultInterval = time.Second
	DefaultTTL      = time.Minute
)

// Config is how runners are probed.
type Config struct {
	// Interval (--runner-probe) is how often each runner is asked for its
	// start epoch; 0 disables probing.
	Interval time.Duration
	// TTL (--owner-ttl) is how long a runner may not answer before its
	// owner's inventory is dropped.
	TTL time.Duration
	// Ping asks a runner for its epoch (default runner.Ping).
	Ping func(ctx context.Context, endpoint string, timeout time.Duration) (uint64, error)
	Log  *slog.Logger // nil: slog.Default
}

// Check says what is wrong with the flags, naming them.
func (c Config) Check() error {
	switch {
	case c.Interval < 0:
		return fmt.Errorf("--runner-probe %v: must not be negative (0 disables the probe)", c.Interval)
	case c.Interval > 0 && c.TTL < c.Interval:
		return fmt.Errorf("--owner-ttl %v: must be at least --runner-probe %v", c.TTL, c.Interval)
	}
	return nil
}

// Target is one runner: TP rank TP of the cache owner of DP rank DP.
type Target struct {
	DP, TP   int
	Endpoint string
}

// Run pings every target every Interval until ctx ends and hands report
// what Watch makes of each answer, with the target's TP rank set; report
// runs on a goroutine per target and may block. It returns once every
// goroutine it started has.
func Run(ctx context.Context, cfg Config, targets []Target, report func(Target, ingest.Runner)) {
	if cfg.Interval <= 0 {
		return
	}
	ping := cfg.Ping
	if ping == nil {
		ping = runner.Ping
	}
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	timeout := min(max(cfg.Interval/2, 100*time.Millisecond), time.Second)
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, tg := range targets {
		wg.Go(func() {
			w := Watch{TTL: cfg.TTL}
			t := time.NewTicker(cfg.Interval)
			defer t.Stop()
			for {
				epoch, err := ping(ctx, tg.Endpoint, timeout)
				if ctx.Err() != nil {
					return
				}
				if rep, send := w.Observe(epoch, err, time.Now()); send {
					if rep.State == ingest.RunnerExpired {
						log.Warn("runner unreachable past --owner-ttl; dropping its cache owner's inventory",
							"dp_rank", tg.DP, "tp_rank", tg.TP, "endpoint", tg.Endpoint, "err", err)
					}
					rep.TP = tg.TP
					report(tg, rep)
				}
				select {
				case <-t.C:
				case <-ctx.Done():
					return
				}
			}
		})
	}
}

// Watch turns one runner's ping results into reports: up with its epoch
// at every answer (the core needs one after every engine-level signal),
// down at the first failure, expired once down for TTL. A refusal for lack
// of connection slots shows the runner alive but says no epoch: no report.
// It is pure: the caller says when each result came.
type Watch struct {
	TTL     time.Duration
	down    bool
	since   time.Time
	expired bool
}

// Observe takes one ping result at now and returns the report to make, if
// any.
func (w *Watch) Observe(epoch uint64, err error, now time.Time) (ingest.Runner, bool) {
	switch {
	case err == nil:
		w.down, w.expired = false, false
		return ingest.Runner{State: ingest.RunnerUp, Epoch: epoch}, true
	case errors.Is(err, runner.ErrPeerBusy):
		return ingest.Runner{}, false
	case !w.down:
		w.down, w.since = true, now
		return ingest.Runner{State: ingest.RunnerDown}, true
	case !w.expired && now.Sub(w.since) >= w.TTL:
		w.expired = true
		return ingest.Runner{State: ingest.RunnerExpired}, true
	}
	return ingest.Runner{}, false
}
