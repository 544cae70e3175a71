// This file holds what the benchmark reads of /metrics and /debug/workers.

package policybench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"kvrouter/internal/cluster"
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

// sample is one line of a Prometheus text exposition.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// parseMetrics reads the samples of a Prometheus text exposition
// (version 0.0.4), skipping comments. Label values may hold escaped
// quotes, commas and braces.
func parseMetrics(text []byte) ([]sample, error) {
	var out []sample
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("metrics line %d %q: %w", n, line, err)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

func parseSample(line string) (sample, error) {
	end := strings.IndexAny(line, "{ \t")
	if end <= 0 {
		return sample{}, fmt.Errorf("no value")
	}
	s := sample{name: line[:end], labels: map[string]string{}}
	rest := line[end:]
	if rest[0] == '{' {
		var err error
		if rest, err = parseLabels(rest[1:], s.labels); err != nil {
			return sample{}, err
		}
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return sample{}, fmt.Errorf("no value")
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return sample{}, err
	}
	s.value = v
	return s, nil
}

// parseLabels reads name="value" pairs up to the closing brace into into
// and returns what follows it.
func parseLabels(s string, into map[string]string) (string, error) {
	for {
		s = strings.TrimLeft(s, " ,")
		if strings.HasPrefix(s, "}") {
			return s[1:], nil
		}
		eq := strings.IndexByte(s, '=')
		if eq <= 0 || len(s) < eq+2 || s[eq+1] != '"' {
			return "", fmt.Errorf("bad label at %q", s)
		}
		name := strings.TrimSpace(s[:eq])
		s = s[eq+2:]
		var v strings.Builder
		i := 0
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				if s[i] == 'n' {
					v.WriteByte('\n')
					continue
				}
			}
			v.WriteByte(s[i])
		}
		if i == len(s) {
			return "", fmt.Errorf("unterminated value of label %s", name)
		}
		into[name] = v.String()
		s = s[i+1:]
	}
}

// sum adds up the samples named name whose labels include every pair of
// match.
func sum(samples []sample, name string, match map[string]string) float64 {
	var total float64
	for _, s := range samples {
		if s.name != name {
			continue
		}
		ok := true
		for k, v := range match {
			if s.labels[k] != v {
				ok = false
				break
			}
		}
		if ok {
			total += s.value
		}
	}
	return total
}

// hintCounts are the router's hint decisions for the requests it sent,
// and every decision's count by reason.
type hintCounts struct {
	issued, skipped int64
	reasons         map[string]int64
}

func readHints(samples []sample) hintCounts {
	h := hintCounts{
		issued:  int64(sum(samples, metricHints, map[string]string{"result": "issued"})),
		skipped: int64(sum(samples, metricHints, map[string]string{"result": "skipped"})),
		reasons: map[string]int64{},
	}
	for _, s := range samples {
		if s.name == metricHints && s.value > 0 {
			h.reasons[s.labels["reason"]] += int64(s.value)
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

func readPulls(samples []sample) pullStats {
	return pullStats{
		count:   sum(samples, metricPeerPull+"_count", nil),
		seconds: sum(samples, metricPeerPull+"_sum", nil),
	}
}

// pullFailures are the hinted requests whose pull brought only part of the
// hinted blocks, or none (the rest was recomputed).
func pullFailures(samples []sample) float64 {
	return sum(samples, metricHintOutcome, map[string]string{"outcome": "partial"}) +
		sum(samples, metricHintOutcome, map[string]string{"outcome": "failed"})
}

// busy is an engine's requests running or waiting.
func busy(samples []sample) float64 {
	return sum(samples, metricRunning, nil) + sum(samples, metricWaiting, nil)
}

// pullTotals adds up every engine's pulls and failed pulls.
func pullTotals(ctx context.Context, engines []cluster.Engine) (p pullStats, failed float64, err error) {
	for _, e := range engines {
		s, err := scrape(ctx, e.URL)
		if err != nil {
			return pullStats{}, 0, fmt.Errorf("engine %s metrics: %w", e.ID, err)
		}
		ps := readPulls(s)
		p.count += ps.count
		p.seconds += ps.seconds
		failed += pullFailures(s)
	}
	return p, failed, nil
}

func scrape(ctx context.Context, base string) ([]sample, error) {
	text, err := cluster.Get(ctx, base+pathMetrics)
	if err != nil {
		return nil, err
	}
	return parseMetrics(text)
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
