// Package demo runs kvrouter end to end on this machine: a local cluster
// of real processes (package cluster) driven by a synthetic multi-turn
// workload (Run), or the upstream peer-restore validation (Seed).
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"kvrouter/internal/cluster"
	"kvrouter/internal/loadgen"
	"kvrouter/internal/workload"
)

// Engine sizing and timing of the demo: SGLang-like 64-token blocks, a
// GPU pool that holds about one engine's share of the workload so that
// moved sessions are worth pulling, and the mocker's default prefill and
// decode costs (a mid-size model on one GPU).
const (
	DefaultEngines         = 3
	DefaultBlockSize       = 64
	DefaultKVBytesPerToken = 1024
	DefaultGPUBlocks       = 2048
	DefaultRunnerBlocks    = 4096
	DefaultPrefillPerToken = 75 * time.Microsecond
	DefaultDecodePerToken  = 10 * time.Millisecond
)

// Workload is the demo's default traffic: workload.Quick's shape with three
// times the sessions and twice the turns, about 20 s against the default
// cluster, on token ids the engines' demo tokenizer knows.
func Workload() workload.AgenticConfig {
	w := workload.Quick()
	w.Sessions, w.Turns = 96, 8
	w.Vocab = demoVocab
	return w
}

// demoVocab: the engines' demo tokenizer has 791 ids, the last few
// special; workload.DefaultVocab's ids would be refused.
var demoVocab = workload.Vocab{Lo: seedVocabLo, Hi: seedVocabHi}

// Options configure a demo run. Zero values take the defaults.
type Options struct {
	Binary  string // kvrouter executable; empty re-executes this one
	Engines int
	Flavor  string
	TP      int
	// Workload shapes the traffic; zero takes Workload().
	Workload workload.AgenticConfig
	Speedup  float64
	LogDir   string
	// Keep holds the cluster up after the run until ctx ends.
	Keep bool
	JSON bool
	// Out receives the summary (a table, or JSON); Err the progress bar
	// and status lines. TTY draws the bar.
	Out, Err io.Writer
	TTY      bool
	Logger   *slog.Logger
}

// Result is the demo's summary, the JSON of --json.
type Result struct {
	Engines  int    `json:"engines"`
	Flavor   string `json:"flavor"`
	Sessions int    `json:"sessions"`
	Turns    int    `json:"turns"`
	Router   string `json:"router"`
	// RouterAdmin is the base URL of the router's operator views.
	RouterAdmin string  `json:"router_admin"`
	LogDir      string  `json:"log_dir"`
	StartMS     float64 `json:"start_ms"`
	WallMS      float64 `json:"wall_ms"`
	loadgen.NamedSummary
}

func (o *Options) fill() {
	if o.Engines == 0 {
		o.Engines = DefaultEngines
	}
	if o.Flavor == "" {
		o.Flavor = "sglang"
	}
	if o.TP == 0 {
		o.TP = 1
	}
	if o.Speedup == 0 {
		o.Speedup = 1
	}
	if o.Workload.Sessions == 0 {
		o.Workload = Workload()
	}
	if o.Workload.Vocab == (workload.Vocab{}) {
		o.Workload.Vocab = demoVocab
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Err == nil {
		o.Err = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// Run starts the cluster, sends the workload through the router, prints
// the summary, and stops everything (after ctx ends, with Keep).
func Run(ctx context.Context, o Options) (Result, error) {
	o.fill()
	reqs, err := workload.Agentic(o.Workload)
	if err != nil {
		return Result{}, fmt.Errorf("demo workload (check --sessions and --turns): %w", err)
	}
	fmt.Fprintf(o.Err, "starting %d %s engines with their state agents and a router...\n", o.Engines, o.Flavor)
	start := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{
		Binary: o.Binary, Engines: o.Engines, Flavor: o.Flavor, TP: o.TP,
		BlockSize: DefaultBlockSize, KVBytesPerToken: DefaultKVBytesPerToken,
		GPUBlocks: DefaultGPUBlocks, RunnerBlocks: DefaultRunnerBlocks,
		PrefillPerToken: DefaultPrefillPerToken, DecodePerToken: DefaultDecodePerToken, Speedup: o.Speedup,
		// No hint flags: the router learns what a pull and a recompute cost
		// from the engines' answers, starting from its documented prior.
		LogDir: o.LogDir, KeepLogs: true, Logger: o.Logger,
	})
	if err != nil {
		return Result{}, err
	}
	res := Result{Engines: o.Engines, Flavor: o.Flavor, Sessions: o.Workload.Sessions, Turns: o.Workload.Turns,
		Router: c.RouterURL(), RouterAdmin: c.RouterAdminURL(), LogDir: c.LogDir(), StartMS: ms(time.Since(start))}
	err = run(ctx, &o, c, reqs, &res)
	if err == nil && o.Keep {
		fmt.Fprintln(o.Err, "cluster kept running; press Ctrl-C to stop it")
		<-ctx.Done()
	}
	fmt.Fprintln(o.Err, "stopping the cluster...")
	return res, errors.Join(err, c.Stop())
}

func run(ctx context.Context, o *Options, c *cluster.Cluster, reqs []workload.Request, res *Result) error {
	fmt.Fprintf(o.Err, "cluster ready in %.1fs; sending %d requests (%d sessions x %d turns) through %s\n",
		res.StartMS/1e3, len(reqs), o.Workload.Sessions, o.Workload.Turns, res.Router)
	d := loadgen.Driver{BaseURL: res.Router, Model: cluster.Model}
	out, err := d.Run(ctx, reqs, loadgen.Progress(o.Err, len(reqs), o.TTY, nil))
	if err != nil {
		return fmt.Errorf("demo workload: %w", err)
	}
	res.WallMS = ms(out.Wall)
	res.NamedSummary = loadgen.NamedSummary{Name: "kvrouter", Summary: out.Summary()}
	res.HintsIssued, res.HintsSkipped, err = hintCounts(ctx, res.RouterAdmin)
	if err != nil {
		return fmt.Errorf("demo: router metrics: %w", err)
	}
	if o.JSON {
		enc := json.NewEncoder(o.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	return printSummary(o.Out, res, o.Keep)
}

func printSummary(w io.Writer, r *Result, keep bool) error {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%d requests in %.1fs on %d %s engines\n\n", r.Requests, r.WallMS/1e3, r.Engines, r.Flavor)
	if err := loadgen.Table(&b, []loadgen.NamedSummary{r.NamedSummary}); err != nil {
		return err
	}
	fmt.Fprintf(&b, "\nprompt tokens %d: %d hit the worker's own cache (%.1f%%), %d pulled from a peer, %d recomputed\n",
		r.PromptTokens, r.LocalCachedTokens, 100*r.LocalHitRatio, r.PeerRestoredTokens, r.RecomputedTokens)
	fmt.Fprintf(&b, "hints issued %d, skipped %d; TTFT p50 %.1f ms, p90 %.1f ms; %d errors\n",
		r.HintsIssued, r.HintsSkipped, r.TTFTP50, r.TTFTP90, r.Errors)
	if keep {
		fmt.Fprintf(&b, "\nwhere to look next (the cluster runs until Ctrl-C):\n")
		fmt.Fprintf(&b, "  curl %s%s                 workers, ranks, readiness, cached blocks per tier\n", r.RouterAdmin, pathWorkers)
		fmt.Fprintf(&b, "  curl -d '{\"model\":%q,\"prompt\":\"hello\"}' %s%s   the decision for a request, nothing sent\n", cluster.Model, r.RouterAdmin, pathRoute)
		fmt.Fprintf(&b, "  curl %s%s                        Prometheus metrics (kvrouter_hints_total, ...)\n", r.RouterAdmin, pathMetrics)
		fmt.Fprintf(&b, "  curl -d '{\"model\":%q,\"prompt\":\"hello\",\"max_tokens\":8}' %s%s\n", cluster.Model, r.Router, pathComplete)
	} else {
		fmt.Fprintf(&b, "\nrun with --keep to explore the cluster afterwards (%s, %s, %s on the router's operator port)\n", pathWorkers, pathRoute, pathMetrics)
	}
	fmt.Fprintf(&b, "  logs of every process: %s\n", r.LogDir)
	_, err := io.WriteString(w, b.String())
	return err
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
