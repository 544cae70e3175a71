// This file holds the runner prober, which tells the core whether each cache owner's runners live and are the ones it knew, and the engine snapshot fetch.

package agent

import (
	"context"

	"kvrouter/internal/ingest"
	"kvrouter/internal/kvstream"
	"kvrouter/internal/runnerprobe"
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
	var targets []runnerprobe.Target
	for _, sc := range d.SourceControl {
		if _, ok := d.OwnerIDs[sc.DPRank]; !ok {
			continue
		}
		for tp, ep := range sc.TPEndpoints {
			targets = append(targets, runnerprobe.Target{DP: sc.DPRank, TP: tp, Endpoint: ep})
		}
	}
	cfg := runnerprobe.Config{Interval: a.cfg.RunnerProbe, TTL: a.cfg.OwnerTTL, Log: a.log.With("component", "runner probe")}
	runnerprobe.Run(ctx, cfg, targets, func(tg runnerprobe.Target, rep ingest.Runner) {
		select {
		case in <- input{dp: tg.DP, runner: &rep}:
		case <-ctx.Done():
		}
	})
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
