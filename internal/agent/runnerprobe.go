// This file holds the runner prober, which tells the core whether each cache owner's runners live and are the ones it knew, and the engine snapshot fetch.

package agent

import (
	"context"
	"errors"
	"sync"
	"time"

	"kvrouter/internal/ingest"
	"kvrouter/internal/kvstream"
	"kvrouter/internal/runner"
	"kvrouter/internal/workerconfig"
)

// probesRunners reports whether the agent probes d's runners: probing is
// on, and the worker has cache owners and their runners' endpoints.
func (a *Agent) probesRunners(d *workerconfig.Descriptor) bool {
	return a.cfg.RunnerProbe > 0 && len(d.OwnerIDs) > 0 && len(d.SourceControl) > 0
}

// probeRunners pings every TP rank's runner of every DP rank that has a
// cache owner, every --runner-probe, and reports each result to the core:
// a cache owner's inventory stands while its runners answer with the
// epoch they had (ingest.Runner).
func (a *Agent) probeRunners(ctx context.Context, d *workerconfig.Descriptor, in chan<- input) {
	timeout := min(max(a.cfg.RunnerProbe/2, 100*time.Millisecond), time.Second)
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, sc := range d.SourceControl {
		if _, ok := d.OwnerIDs[sc.DPRank]; !ok {
			continue
		}
		for tp, ep := range sc.TPEndpoints {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w := runnerWatch{ttl: a.cfg.OwnerTTL}
				t := time.NewTicker(a.cfg.RunnerProbe)
				defer t.Stop()
				for {
					epoch, err := runner.Ping(ctx, ep, timeout)
					if ctx.Err() != nil {
						return
					}
					if rep, send := w.observe(epoch, err, time.Now()); send {
						if rep.State == ingest.RunnerExpired {
							a.log.Warn("agent: runner unreachable past --owner-ttl; dropping its cache owner's inventory",
								"dp_rank", sc.DPRank, "tp_rank", tp, "endpoint", ep, "err", err)
						}
						rep.TP = tp
						select {
						case in <- input{dp: sc.DPRank, runner: &rep}:
						case <-ctx.Done():
							return
						}
					}
					select {
					case <-t.C:
					case <-ctx.Done():
						return
					}
				}
			}()
		}
	}
}

// runnerWatch turns one runner's ping results into reports: up with its
// epoch at every answer (the core needs one after every engine-level
// signal), down at the first failure, expired once down for the TTL. A
// refusal for lack of connection slots shows the runner alive but says
// no epoch: no report.
type runnerWatch struct {
	ttl     time.Duration
	down    bool
	since   time.Time
	expired bool
}

func (w *runnerWatch) observe(epoch uint64, err error, now time.Time) (ingest.Runner, bool) {
	switch {
	case err == nil:
		w.down, w.expired = false, false
		return ingest.Runner{State: ingest.RunnerUp, Epoch: epoch}, true
	case errors.Is(err, runner.ErrPeerBusy):
		return ingest.Runner{}, false
	case !w.down:
		w.down, w.since = true, now
		return ingest.Runner{State: ingest.RunnerDown}, true
	case !w.expired && now.Sub(w.since) >= w.ttl:
		w.expired = true
		return ingest.Runner{State: ingest.RunnerExpired}, true
	}
	return ingest.Runner{}, false
}

// fetchSnapshot asks DP rank dp's engine for its snapshot-v1 cut; nil when
// it cannot be had, and the rank catches up from the replay alone.
func (a *Agent) fetchSnapshot(ctx context.Context, dp int, endpoint string) *kvstream.Snapshot {
	s, err := kvstream.FetchSnapshot(ctx, endpoint, kvstream.SnapshotClientConfig{Logger: a.log})
	if err != nil {
		if ctx.Err() == nil {
			a.log.Warn("agent: engine snapshot unavailable; catching up from the replay buffer alone", "dp_rank", dp, "snapshot", endpoint, "err", err)
		}
		return nil
	}
	a.log.Info("agent: engine snapshot", "dp_rank", dp, "epoch", s.Header.Epoch, "resume_seq", s.Header.ResumeSeq, "blocks", len(s.Blocks))
	return s
}
