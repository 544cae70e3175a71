// Package policybench compares routing policies side by side on a simulated
// fleet, `kvrouter bench routing`: one local cluster (package cluster), the
// same engines, reset between policies, the same workload, and only the
// router service's flags changed. It measures what
// KV-aware routing and peer pull hints buy: fewer recomputed prompt tokens
// and a shorter time to first token.
package policybench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"kvrouter/internal/cluster"
	"kvrouter/internal/loadgen"
	"kvrouter/internal/workload"
)

// resetWait bounds the wait for engines to go idle and for a fresh router
// to see their caches empty: a safety net, not a timing assertion.
const resetWait = 60 * time.Second

// Run starts the cluster, runs the workload once per policy and repeat
// from identical cold caches, prints the report (and writes the plot), and
// stops every process it started, also when ctx is cancelled.
func Run(ctx context.Context, o Options) (Result, error) {
	o.fill()
	if err := o.check(); err != nil {
		return Result{}, err
	}
	policies, _ := o.policies()
	reqs, wcfg, err := o.requests()
	if err != nil {
		return Result{}, err
	}
	res := Result{Config: o.config(wcfg, reqs)}
	res.Config.LoadAvgStart = loadAvg()
	fmt.Fprintf(o.Err, "starting %d engines with their state agents...\n", o.Engines)
	start := time.Now()
	c, err := cluster.Start(ctx, o.clusterOptions())
	if err != nil {
		return res, err
	}
	res.Config.LogDir = c.LogDir()
	fmt.Fprintf(o.Err, "cluster ready in %.1fs; logs in %s\n", time.Since(start).Seconds(), c.LogDir())
	err = runAll(ctx, &o, c, policies, &res)
	fmt.Fprintln(o.Err, "stopping the cluster...")
	if serr := c.Stop(); serr != nil {
		return res, errors.Join(err, serr)
	}
	if err == nil && o.LogDir == "" {
		// The logs were kept for a failure to be explained; there was none.
		os.RemoveAll(c.LogDir())
		res.Config.LogDir = ""
	}
	if err != nil {
		return res, fmt.Errorf("%w (logs in %s)", err, c.LogDir())
	}
	return res, o.print(&res)
}

// runAll runs every policy once per repeat, each repeat on its own seed
// and in its own rotation of the policies, so that a drift in the host's
// load does not always hit the same policy.
func runAll(ctx context.Context, o *Options, c *cluster.Cluster, policies []Policy, res *Result) error {
	engines := c.Engines()
	for _, r := range c.Routers() {
		if err := c.StopRouter(r); err != nil {
			return fmt.Errorf("stopping the start-up router: %w", err)
		}
	}
	if err := resetEngines(ctx, engines); err != nil {
		return err
	}
	for rep := range o.Repeats {
		ro := *o
		ro.Agentic.Seed = o.Agentic.Seed + uint64(rep)
		reqs, _, err := ro.requests()
		if err != nil {
			return err
		}
		run := RepeatRun{Seed: ro.Agentic.Seed, Policies: map[string]loadgen.NamedSummary{}, Details: map[string]PolicyRun{}}
		if o.Workload == WorkloadMooncake {
			run.Seed = uint64(rep + 1) // the trace is the same every time
		}
		for i := range policies {
			p := policies[(i+rep)%len(policies)]
			label := p.Name
			if o.Repeats > 1 {
				label = fmt.Sprintf("%s (seed %d)", p.Name, run.Seed)
			}
			sum, pr, err := runPolicy(ctx, &ro, c, p, reqs, label, recordsName(p.Name, run.Seed, o.Repeats))
			if err != nil {
				return fmt.Errorf("policy %s, seed %d: %w", p.Name, run.Seed, err)
			}
			run.Policies[p.Name] = sum
			run.Details[p.Name] = pr
			run.Order = append(run.Order, p.Name)
			fmt.Fprintf(o.Err, "%s: %d requests in %.1fs, %d errors, TTFT p50 %.1f ms p90 %.1f ms, %d recomputed tokens, %d hints; load %s\n",
				label, sum.Requests, pr.WallMS/1e3, sum.Errors, sum.TTFTP50, sum.TTFTP90, sum.RecomputedTokens, sum.HintsIssued, pr.LoadAvg)
			if err := resetEngines(ctx, engines); err != nil {
				return err
			}
		}
		run.finish(policies)
		res.Runs = append(res.Runs, run)
	}
	res.finish(o.Workload, policies)
	res.Config.LoadAvgEnd = loadAvg()
	return nil
}

// recordsName is the --records file of a policy's run.
func recordsName(policy string, seed uint64, repeats int) string {
	if repeats > 1 {
		return fmt.Sprintf("%s-seed%d.jsonl", policy, seed)
	}
	return policy + ".jsonl"
}

// runPolicy starts the policy's router on the reset engines, waits until
// it sees their caches empty, sends the workload through it and reads its
// hint counters and, for a hinting policy, what it learned.
func runPolicy(ctx context.Context, o *Options, c *cluster.Cluster, p Policy, reqs []workload.Request, label, records string) (loadgen.NamedSummary, PolicyRun, error) {
	flags := append(slices.Clone(p.Flags), o.hintFlags()...)
	r, err := c.AddRouter(ctx, flags)
	if err != nil {
		return loadgen.NamedSummary{}, PolicyRun{}, err
	}
	stopped := false
	defer func() {
		if !stopped {
			c.StopRouter(r)
		}
	}()
	if err := awaitEmpty(ctx, r.Admin, c.Engines()); err != nil {
		return loadgen.NamedSummary{}, PolicyRun{}, err
	}
	pulls0, failed0, err := pullTotals(ctx, c.Engines())
	if err != nil {
		return loadgen.NamedSummary{}, PolicyRun{}, err
	}
	fmt.Fprintf(o.Err, "%s: sending %d requests through %s\n", label, len(reqs), r.URL)
	d := loadgen.Driver{BaseURL: r.URL, Model: cluster.Model, IgnoreEOS: true}
	bar := loadgen.Progress(prefixCR{o.Err, label + " "}, len(reqs), o.TTY, nil)
	out, err := d.Run(ctx, reqs, bar)
	if err != nil {
		return loadgen.NamedSummary{}, PolicyRun{}, err
	}
	if o.Records != "" {
		if err := writeRecords(filepath.Join(o.Records, records), out); err != nil {
			return loadgen.NamedSummary{}, PolicyRun{}, err
		}
	}
	samples, err := scrape(ctx, r.Admin)
	if err != nil {
		return loadgen.NamedSummary{}, PolicyRun{}, fmt.Errorf("router metrics: %w", err)
	}
	h := readHints(samples)
	pulls1, failed1, err := pullTotals(ctx, c.Engines())
	if err != nil {
		return loadgen.NamedSummary{}, PolicyRun{}, err
	}
	pr := PolicyRun{Flags: flags, WallMS: ms(out.Wall), HintReasons: h.reasons, FirstError: firstError(out),
		Pulls: int(pulls1.count - pulls0.count), PullsFailed: int(failed1 - failed0), LoadAvg: loadAvg()}
	if pr.Pulls > 0 {
		pr.PullMSMean = (pulls1.seconds - pulls0.seconds) * 1e3 / float64(pr.Pulls)
	}
	if slices.Contains(flags, "cost") {
		if pr.Learned, err = learned(ctx, r.Admin); err != nil {
			return loadgen.NamedSummary{}, PolicyRun{}, fmt.Errorf("router estimates: %w", err)
		}
	}
	stopped = true
	if err := c.StopRouter(r); err != nil {
		return loadgen.NamedSummary{}, PolicyRun{}, err
	}
	sum := loadgen.NamedSummary{Name: p.Name, Summary: out.Summary(), HintsIssued: h.issued, HintsSkipped: h.skipped}
	return sum, pr, nil
}

func firstError(r loadgen.Results) string {
	for _, rec := range r.Records {
		if rec.Err != nil {
			return rec.ID + ": " + rec.Err.Error()
		}
	}
	return ""
}

// resetEngines waits until no engine runs or queues a request (a request
// the client gave up on may outlive the run), then clears every engine's
// GPU pool and runner, which publishes the removals to the agents.
func resetEngines(ctx context.Context, engines []cluster.Engine) error {
	for _, e := range engines {
		err := poll(ctx, resetWait, "engine "+e.ID+" idle", func() (bool, string, error) {
			s, err := scrape(ctx, e.URL)
			if err != nil {
				return false, "", err
			}
			n := busy(s)
			return n == 0, fmt.Sprintf("%v requests running or waiting", n), nil
		})
		if err != nil {
			return err
		}
		if _, err := cluster.PostJSON(ctx, e.URL+pathReset, "", nil, nil); err != nil {
			return fmt.Errorf("reset engine %s: %w", e.ID, err)
		}
	}
	return nil
}

// awaitEmpty waits until the router lists every engine ready with nothing
// indexed for it, so that each policy starts from the same cold state.
func awaitEmpty(ctx context.Context, admin string, engines []cluster.Engine) error {
	var ids []string
	for _, e := range engines {
		ids = append(ids, e.ID)
	}
	return poll(ctx, resetWait, "router index empty after the reset", func() (bool, string, error) {
		var v workersView
		data, err := cluster.Get(ctx, admin+pathWorkers)
		if err == nil {
			err = jsonUnmarshal(data, &v)
		}
		if err != nil {
			return false, "", err
		}
		blocks, missing := v.indexed(ids)
		var left []string
		for _, id := range ids {
			if blocks[id] > 0 {
				left = append(left, fmt.Sprintf("%s %d blocks", id, blocks[id]))
			}
		}
		if len(missing) > 0 {
			left = append(left, "not ready: "+strings.Join(missing, ", "))
		}
		return len(left) == 0, strings.Join(left, "; "), nil
	})
}

// prefixCR names the policy on the progress bar, which redraws its line
// after a carriage return.
type prefixCR struct {
	w      io.Writer
	prefix string
}

func (p prefixCR) Write(b []byte) (int, error) {
	s := strings.ReplaceAll(string(b), "\r", "\r"+p.prefix)
	if _, err := io.WriteString(p.w, s); err != nil {
		return 0, err
	}
	return len(b), nil
}

// loadAvg is the machine's 1, 5 and 15 minute load averages, where the
// system tells them (Linux); the run competes with whatever else runs.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
