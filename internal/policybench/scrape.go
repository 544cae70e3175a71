// This file holds what the benchmark reads of /metrics and /debug/workers.

package policybench

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"kvrouter/internal/cluster"
	"kvrouter/internal/promtext"
)

// Wire names this benchmark reads from the router and the engines.
const (
	pathMetrics  = "/metrics"
	pathWorkers  = "/debug/workers"
	pathRoute    = "/debug/route"
	pathComplete = "/v1/completions"
	pathReset    = "/admin/reset"
	headerWorker = "x-kvrouter-worker"

	metricHints       = "kvrouter_hints_total"
	metricPeerPull    = "kvrouter_mocker_peer_pull_seconds"
	metricRunning     = "kvrouter_mocker_requests_running"
	metricWaiting     = "kvrouter_mocker_requests_waiting"
	metricHintOutcome = "kvrouter_mocker_hint_outcomes_total"
)

// hintCounts are the router's hint decisions for the requests it sent,
// and every decision's count by reason.
type hintCounts struct {
	issued, skipped int64
	reasons         map[string]int64
}

func readHints(m promtext.Exposition) hintCounts {
	h := hintCounts{
		issued:  int64(m.Sum(metricHints, map[string]string{"result": "issued"})),
		skipped: int64(m.Sum(metricHints, map[string]string{"result": "skipped"})),
		reasons: map[string]int64{},
	}
	for _, s := range m.Samples(metricHints) {
		if s.Value > 0 {
			h.reasons[s.Labels["reason"]] += int64(s.Value)
		}
	}
	return h
}

// pullStats is an engine's peer pull histogram: pulls made and their total
// wall time.
type pullStats struct {
	count   float64
	seconds float64
}

func readPulls(m promtext.Exposition) pullStats {
	var p pullStats
	p.count, p.seconds = m.Histogram(metricPeerPull)
	return p
}

// pullFailures are the hinted requests whose pull brought only part of the
// hinted blocks, or none (the rest was recomputed).
func pullFailures(m promtext.Exposition) float64 {
	return m.Sum(metricHintOutcome, map[string]string{"outcome": "partial"}) +
		m.Sum(metricHintOutcome, map[string]string{"outcome": "failed"})
}

// busy is an engine's requests running or waiting.
func busy(m promtext.Exposition) float64 {
	return m.Sum(metricRunning, nil) + m.Sum(metricWaiting, nil)
}

// pullTotals adds up every engine's pulls and failed pulls.
func pullTotals(ctx context.Context, engines []cluster.Engine) (p pullStats, failed float64, err error) {
	for _, e := range engines {
		m, err := scrape(ctx, e.URL)
		if err != nil {
			return pullStats{}, 0, fmt.Errorf("engine %s metrics: %w", e.ID, err)
		}
		ps := readPulls(m)
		p.count += ps.count
		p.seconds += ps.seconds
		failed += pullFailures(m)
	}
	return p, failed, nil
}

func scrape(ctx context.Context, base string) (promtext.Exposition, error) {
	text, err := cluster.Get(ctx, base+pathMetrics)
	if err != nil {
		return nil, err
	}
	return promtext.Parse(text)
}

// workersView is the part of the router's GET /debug/workers that tells
// what its index holds for every worker: per DP rank and per cache owner,
// blocks by tier (counted afresh on every request of the view).
type workersView struct {
	Workers []struct {
		ID    string `json:"id"`
		Ranks []struct {
			Ready  bool           `json:"ready"`
			Blocks map[string]int `json:"blocks"`
		} `json:"ranks"`
		Owners []struct {
			Ready  bool           `json:"ready"`
			Blocks map[string]int `json:"blocks"`
		} `json:"owners"`
	} `json:"workers"`
}

// indexed returns the blocks the router indexes for each of ids (ranks and
// owners, every tier), and the ids it does not list or whose sources are
// not ready.
func (v workersView) indexed(ids []string) (blocks map[string]int, missing []string) {
	blocks = map[string]int{}
	for _, id := range ids {
		found := false
		for _, w := range v.Workers {
			if w.ID != id {
				continue
			}
			found = len(w.Ranks) > 0 && len(w.Owners) > 0
			for _, r := range w.Ranks {
				found = found && r.Ready
				for _, n := range r.Blocks {
					blocks[id] += n
				}
			}
			for _, o := range w.Owners {
				found = found && o.Ready
				for _, n := range o.Blocks {
					blocks[id] += n
				}
			}
		}
		if !found {
			missing = append(missing, id)
		}
	}
	return blocks, missing
}

// poll calls cond every pollEvery until it holds, fails for good, or
// within passes; the last transient error or what is still missing goes
// into the timeout's message.
func poll(ctx context.Context, within time.Duration, what string, cond func() (done bool, why string, err error)) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var why string
	for {
		done, w, err := cond()
		if done {
			return nil
		}
		if err != nil {
			w = err.Error()
		}
		if w != "" {
			why = w
		}
		select {
		case <-ctx.Done():
			if why != "" {
				return fmt.Errorf("%s: %w (%s)", what, ctx.Err(), why)
			}
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-time.After(pollEvery):
		}
	}
}

const pollEvery = 25 * time.Millisecond

// learned is a router's hint estimates from GET /debug/workers.
func learned(ctx context.Context, router string) (json.RawMessage, error) {
	data, err := cluster.Get(ctx, router+pathWorkers)
	if err != nil {
		return nil, err
	}
	var v struct {
		HintEstimates json.RawMessage `json:"hint_estimates"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	return v.HintEstimates, nil
}
