// This file holds the benchmark's report: JSON, table, plot and per-request records.

package policybench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"kvrouter/internal/cluster"
	"kvrouter/internal/loadgen"
	"kvrouter/internal/workload"
)

// Result is the benchmark's report, the JSON of --json:
//
//	{"workload": "agentic", "policies": {"round_robin": {...}, ...},
//	 "ratios": {"kv_hints_ttft_p90_vs_kv": 0.6, ...}, "config": {...}}
type Result struct {
	loadgen.Report
	Config Config `json:"config"`
	// runs are the policies' figures in the order they ran.
	runs []loadgen.NamedSummary
}

// Runs are the policies' figures in the order they ran.
func (r Result) Runs() []loadgen.NamedSummary { return r.runs }

// Config is how the figures were obtained: the cluster, the calibration,
// the workload and each policy's router flags.
type Config struct {
	Quick             bool    `json:"quick"`
	Engines           int     `json:"engines"`
	BlockSize         int     `json:"block_size"`
	KVBytesPerToken   int     `json:"kv_bytes_per_token"`
	BlockBytes        int     `json:"block_bytes"`
	GPUBlocks         int     `json:"gpu_blocks"`
	RunnerBlocks      int     `json:"runner_blocks"`
	PrefillUSPerToken float64 `json:"prefill_us_per_token"`
	DecodeMSPerToken  float64 `json:"decode_ms_per_token"`
	RestoreUSPerToken float64 `json:"restore_us_per_token"`
	// PullSetupMS is the engines' simulated fixed cost of a peer pull, in
	// simulated ms (they wait it divided by the speedup).
	PullSetupMS float64     `json:"pull_setup_ms"`
	Speedup     float64     `json:"speedup"`
	Calibration Calibration `json:"calibration"`
	// Workload holds the agentic shape or the trace replay's settings.
	Workload     any                  `json:"workload_config"`
	Requests     int                  `json:"requests"`
	PromptTokens int64                `json:"workload_prompt_tokens"`
	Order        []string             `json:"order"`
	Policies     map[string]PolicyRun `json:"policies"`
	// LoadAvg* are /proc/loadavg's 1, 5 and 15 minute averages before and
	// after the run.
	LoadAvgStart string `json:"loadavg_start"`
	LoadAvgEnd   string `json:"loadavg_end"`
	LogDir       string `json:"log_dir,omitempty"`
	Plot         string `json:"plot,omitempty"`
}

// PolicyRun is one policy's router flags and how long its run took.
type PolicyRun struct {
	Flags  []string `json:"flags"`
	WallMS float64  `json:"wall_ms"`
	// HintReasons counts the router's hint decisions by reason ("hinted"
	// for those issued).
	HintReasons map[string]int64 `json:"hint_reasons"`
	// Pulls are the engines' peer pulls during the run, their mean wall
	// time, and those that brought fewer blocks than hinted.
	Pulls       int     `json:"pulls"`
	PullMSMean  float64 `json:"pull_ms_mean"`
	PullsFailed int     `json:"pulls_failed"`
	FirstError  string  `json:"first_error,omitempty"`
}

// agenticJSON is the agentic workload's shape as reported.
type agenticJSON struct {
	Sessions        int     `json:"sessions"`
	Turns           int     `json:"turns"`
	SystemPrompts   int     `json:"system_prompts"`
	SystemTokensMin int     `json:"system_tokens_min"`
	SystemTokensMax int     `json:"system_tokens_max"`
	UserTokens      int     `json:"user_tokens"`
	OutputTokens    int     `json:"output_tokens"`
	ThinkMS         float64 `json:"think_ms"`
	BurstSize       int     `json:"burst_size"`
	BurstIntervalMS float64 `json:"burst_interval_ms"`
	ArrivalRate     float64 `json:"arrival_rate"`
	Seed            uint64  `json:"seed"`
	WarmPrompts     bool    `json:"warm_prompts"`
}

type mooncakeJSON struct {
	Trace       string  `json:"trace"`
	TimeScale   float64 `json:"time_scale"`
	MaxRequests int     `json:"max_requests"`
}

// requests builds the workload and describes it for the report.
func (o *Options) requests() ([]workload.Request, any, error) {
	if o.Workload == WorkloadMooncake {
		name, r := "embedded small trace", io.Reader(workload.SmallTrace())
		if o.Trace != "" {
			f, err := os.Open(o.Trace)
			if err != nil {
				return nil, nil, fmt.Errorf("--trace: %w", err)
			}
			defer f.Close()
			name, r = o.Trace, f
		}
		reqs, err := workload.ReadMooncake(r, workload.MooncakeOptions{TimeScale: o.TimeScale, MaxRequests: o.MaxRequests, Vocab: demoVocab})
		if err != nil {
			return nil, nil, fmt.Errorf("--trace %s: %w", name, err)
		}
		return reqs, mooncakeJSON{name, o.TimeScale, o.MaxRequests}, nil
	}
	w := o.Agentic
	reqs, err := workload.Agentic(w)
	if err != nil {
		return nil, nil, fmt.Errorf("agentic workload (check --sessions, --turns, --burst, --rate): %w", err)
	}
	return reqs, agenticJSON{w.Sessions, w.Turns, w.SystemPrompts, w.SystemTokensMin, w.SystemTokensMax,
		w.UserTokens, w.OutputTokens, ms(w.ThinkTime), w.BurstSize, ms(w.BurstInterval), w.ArrivalRate, w.Seed, w.WarmPrompts}, nil
}

func (o *Options) config(w any, reqs []workload.Request) Config {
	c := Config{
		Quick: o.Quick, Engines: o.Engines, BlockSize: o.BlockSize, KVBytesPerToken: o.KVBytesPerToken,
		BlockBytes: o.BlockSize * o.KVBytesPerToken, GPUBlocks: o.GPUBlocks, RunnerBlocks: o.RunnerBlocks,
		PrefillUSPerToken: us(o.PrefillPerToken), DecodeMSPerToken: ms(o.DecodePerToken),
		RestoreUSPerToken: us(o.RestorePerToken), PullSetupMS: ms(max(o.PullSetup, 0)), Speedup: o.Speedup,
		Workload: w, Requests: len(reqs), Policies: map[string]PolicyRun{}, Plot: o.Plot,
	}
	for _, r := range reqs {
		c.PromptTokens += int64(len(r.Prompt))
	}
	return c
}

// clusterOptions: engines sized and timed as the options say, the
// calibration router first.
func (o *Options) clusterOptions() cluster.Options {
	return cluster.Options{
		Binary: o.Binary, Engines: o.Engines,
		BlockSize: o.BlockSize, KVBytesPerToken: o.KVBytesPerToken,
		GPUBlocks: o.GPUBlocks, RunnerBlocks: o.RunnerBlocks,
		PrefillPerToken: o.PrefillPerToken, DecodePerToken: o.DecodePerToken, Speedup: o.Speedup,
		EngineFlags: o.engineFlags(),
		RouterFlags: [][]string{probeRouterFlags},
		// Kept until the run succeeded, so that a failure can be explained.
		LogDir: o.LogDir, KeepLogs: true, Logger: o.Logger,
	}
}

// engineFlags are the mocker flags the cluster options have no field for.
func (o *Options) engineFlags() []string {
	f := []string{"--restore-us-per-token", fmtFloat(us(o.RestorePerToken))}
	if o.PullSetup > 0 {
		f = append(f, "--pull-setup-ms", fmtFloat(float64(o.PullSetup)/float64(time.Millisecond)))
	}
	return f
}

// summary is the calibration in one line for the progress output.
func (c Calibration) summary() string {
	how := "given"
	if c.Measured {
		how = fmt.Sprintf("measured over %d pulls", len(c.Probes))
	}
	return fmt.Sprintf("calibration (%s): pull %.2f ms + %.2f Gbit/s, restore %.2f µs/token -> --hint-bandwidth-gbps %.3g --hint-setup-ms %.3g --hint-prefill-tokens-per-s %.4g; crossover %s",
		how, c.PullSetupMS, c.PullGbps, c.RestoreUSPerToken, c.HintBandwidthGbps, c.HintSetupMS, c.PrefillTokensPerS, c.crossover())
}

func (c Calibration) crossover() string {
	if c.CrossoverTokens == nil {
		return "none (a pull never beats a recompute: no hint will be issued)"
	}
	return fmt.Sprintf("%.0f tokens (%.1f blocks)", *c.CrossoverTokens, *c.CrossoverTokens/float64(c.BlockSize))
}

// print writes the plot and the report: the table, or with JSON the JSON
// and the table on the progress stream, so that one run gives both.
func (o *Options) print(r *Result) error {
	if o.Plot != "" {
		if err := writePlot(o.Plot, r.runs); err != nil {
			return err
		}
	}
	if !o.JSON {
		return writeTable(o.Out, r)
	}
	if err := writeTable(o.Err, r); err != nil {
		return err
	}
	enc := json.NewEncoder(o.Out)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func writePlot(path string, runs []loadgen.NamedSummary) error {
	series := map[string][]float64{}
	for _, run := range runs {
		series[run.Name] = run.TTFT
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	if err := loadgen.PlotTTFTCDF(f, series); err != nil {
		f.Close()
		return fmt.Errorf("--plot %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	return nil
}

func writeTable(w io.Writer, r *Result) error {
	var b strings.Builder
	c := r.Config
	fmt.Fprintf(&b, "\n%s workload: %d requests, %d prompt tokens, on %d engines (%d-token blocks of %d KiB, %d GPU + %d runner blocks, prefill %.0f µs/token, speedup %g)\n\n",
		r.Workload, c.Requests, c.PromptTokens, c.Engines, c.BlockSize, c.BlockBytes>>10, c.GPUBlocks, c.RunnerBlocks, c.PrefillUSPerToken, c.Speedup)
	if err := loadgen.Table(&b, r.runs); err != nil {
		return err
	}
	b.WriteByte('\n')
	if len(r.runs) > 0 && r.runs[0].Summary.Warmup > 0 {
		fmt.Fprintf(&b, "Each policy also sent %d warm-up requests, not measured: the first on each shared system prompt, computed cold under every policy.\n\n",
			r.runs[0].Summary.Warmup)
	}
	if err := loadgen.WriteRatios(&b, r.runs, Reference); err != nil {
		return err
	}
	for _, name := range c.Order {
		if p := c.Policies[name]; p.Pulls > 0 {
			fmt.Fprintf(&b, "%s: %d peer pulls, %.1f ms each on average, %d brought fewer blocks than hinted\n",
				name, p.Pulls, p.PullMSMean, p.PullsFailed)
		}
	}
	fmt.Fprintf(&b, "\n%s\n", c.Calibration.summary())
	if c.Calibration.MeasuredPrefillTokensPerS > 0 {
		fmt.Fprintf(&b, "recompute rate seen by the probes: %.4g tokens/s (nominal %.4g)\n",
			c.Calibration.MeasuredPrefillTokensPerS, c.Calibration.PrefillTokensPerS)
		if share, slow := c.Calibration.slowEngines(); slow {
			fmt.Fprintf(&b, "warning: the engines recomputed at %.0f%% of their configured speed: the host was too busy for them, so this run compares the policies on a slower cluster than configured; run it on an idle machine, or with fewer --engines or a lower --speedup\n",
				share*100)
		}
	}
	fmt.Fprintf(&b, "load average before %s, after %s\n", orNA(c.LoadAvgStart), orNA(c.LoadAvgEnd))
	if c.Plot != "" {
		fmt.Fprintf(&b, "TTFT CDF per policy: %s\n", c.Plot)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// record is one request of a policy's run, as --records writes it.
type record struct {
	ID                 string  `json:"id"`
	Session            string  `json:"session,omitempty"`
	Turn               int     `json:"turn"`
	DueMS              float64 `json:"due_ms"`
	SentMS             float64 `json:"sent_ms"`
	TTFTMS             float64 `json:"ttft_ms"`
	E2EMS              float64 `json:"e2e_ms"`
	PromptTokens       int     `json:"prompt_tokens"`
	LocalCachedTokens  int     `json:"local_cached_tokens"`
	PeerRestoredTokens int     `json:"peer_restored_tokens"`
	Error              string  `json:"error,omitempty"`
}

// writeRecords writes every request of a run as a JSON line, to see
// which requests make a tail.
func writeRecords(path string, out loadgen.Results) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("--records: %w", err)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, r := range out.Records {
		rec := record{ID: r.ID, Session: r.Session, Turn: r.Turn, DueMS: ms(r.Due), SentMS: ms(r.Sent),
			TTFTMS: ms(r.TTFT), E2EMS: ms(r.E2E), PromptTokens: r.Usage.PromptTokens,
			LocalCachedTokens: r.Usage.LocalCachedTokens, PeerRestoredTokens: r.Usage.PeerRestoredTokens}
		if r.Err != nil {
			rec.Error = r.Err.Error()
		}
		if err := enc.Encode(rec); err != nil {
			return err
		}
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("--records: %w", err)
	}
	return nil
}

func orNA(s string) string {
	if s == "" {
		return "n/a"
	}
	return s
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func jsonUnmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
