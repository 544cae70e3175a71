// This file holds the benchmark's report: JSON, table, plot and per-request records.

package policybench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"kvrouter/internal/cluster"
	"kvrouter/internal/loadgen"
	"kvrouter/internal/workload"
)

// Result is the benchmark's report, the JSON of --json:
//
//	{"workload": "agentic", "policies": {"round_robin": {...}, ...},
//	 "ratios": {"kv_hints_ttft_p90_vs_kv": 0.6, ...},
//	 "comparisons": {"kv_hints_ttft_p90_vs_kv": {...}, ...},
//	 "runs": [{"seed": 1, "policies": {...}, ...}, ...], "config": {...}}
//
// With --repeats N every figure under "policies" is the median over the N
// runs, and "ratios" compare those medians; "runs" holds each repeat's own
// figures.
type Result struct {
	loadgen.Report
	// Comparisons weigh each ratio against the runs' spread.
	Comparisons map[string]Comparison `json:"comparisons"`
	Runs        []RepeatRun           `json:"runs"`
	Config      Config                `json:"config"`
	// runs are the medians, in the canonical order, with every repeat's
	// TTFTs pooled for the plot.
	runs []loadgen.NamedSummary
}

// Medians are the policies' figures (medians over the repeats) in the
// canonical order.
func (r Result) Medians() []loadgen.NamedSummary { return r.runs }

// RepeatRun is one repeat: every policy on the same seed.
type RepeatRun struct {
	Seed     uint64                          `json:"seed"`
	Order    []string                        `json:"order"`
	Policies map[string]loadgen.NamedSummary `json:"policies"`
	Ratios   map[string]float64              `json:"ratios"`
	Details  map[string]PolicyRun            `json:"details"`
	runs     []loadgen.NamedSummary          // in the canonical order
}

// Comparison is the reference policy's TTFT p90 against another's over the
// repeats: the ratio of the medians, the per-repeat ratios' median and
// range, and whether the difference of the medians exceeds the larger of the
// two policies' spreads (max - min over the repeats).
type Comparison struct {
	Ratio        float64 `json:"ratio"`
	RatioMedian  float64 `json:"ratio_median"`
	RatioMin     float64 `json:"ratio_min"`
	RatioMax     float64 `json:"ratio_max"`
	DifferenceMS float64 `json:"difference_ms"`
	SpreadMS     float64 `json:"spread_ms"`
	Conclusive   bool    `json:"conclusive"`
}

// Config is how the figures were obtained: the cluster, the workload and
// each policy's router flags.
type Config struct {
	Quick             bool    `json:"quick"`
	Repeats           int     `json:"repeats"`
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
	PullSetupMS float64 `json:"pull_setup_ms"`
	Speedup     float64 `json:"speedup"`
	// Nominal is what the engines really cost, in wall time: what the
	// kv_hints router should learn.
	Nominal Nominal `json:"nominal"`
	// HintFlags fix figures the router would otherwise learn (none by
	// default).
	HintFlags []string `json:"hint_flags"`
	// Workload holds the agentic shape or the trace replay's settings (of
	// the first repeat's seed).
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

// Nominal is the engines' configured cost of a recompute and of a pull's
// setup, in wall time.
type Nominal struct {
	PrefillTokensPerS float64 `json:"prefill_tokens_per_s"`
	PullSetupMS       float64 `json:"pull_setup_ms"`
	RestoreUSPerToken float64 `json:"restore_us_per_token"`
}

// PolicyRun is one policy's router flags and how its run went. In
// config.policies the counts add up over the repeats.
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
	// LoadAvg is /proc/loadavg's averages when the run ended.
	LoadAvg string `json:"loadavg,omitempty"`
	// Learned is a hinting router's /debug/workers hint_estimates at the
	// end of its run.
	Learned json.RawMessage `json:"learned,omitempty"`
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
		Quick: o.Quick, Repeats: o.Repeats, Engines: o.Engines, BlockSize: o.BlockSize, KVBytesPerToken: o.KVBytesPerToken,
		BlockBytes: o.BlockSize * o.KVBytesPerToken, GPUBlocks: o.GPUBlocks, RunnerBlocks: o.RunnerBlocks,
		PrefillUSPerToken: us(o.PrefillPerToken), DecodeMSPerToken: ms(o.DecodePerToken),
		RestoreUSPerToken: us(o.RestorePerToken), PullSetupMS: ms(max(o.PullSetup, 0)), Speedup: o.Speedup,
		Nominal: Nominal{PrefillTokensPerS: float64(time.Second) / float64(o.PrefillPerToken) * o.Speedup,
			PullSetupMS: ms(max(o.PullSetup, 0)) / o.Speedup, RestoreUSPerToken: us(o.RestorePerToken) / o.Speedup},
		HintFlags: o.hintFlags(),
		Workload:  w, Requests: len(reqs), Policies: map[string]PolicyRun{}, Plot: o.Plot,
	}
	for _, r := range reqs {
		c.PromptTokens += int64(len(r.Prompt))
	}
	return c
}

// clusterOptions: engines sized and timed as the options say, and a router
// whose start waits until every engine's stream is live (the cluster pokes
// the engines for it); each policy then starts its own.
func (o *Options) clusterOptions() cluster.Options {
	return cluster.Options{
		Binary: o.Binary, Engines: o.Engines,
		BlockSize: o.BlockSize, KVBytesPerToken: o.KVBytesPerToken,
		GPUBlocks: o.GPUBlocks, RunnerBlocks: o.RunnerBlocks,
		PrefillPerToken: o.PrefillPerToken, DecodePerToken: o.DecodePerToken, Speedup: o.Speedup,
		EngineFlags: o.engineFlags(),
		RouterFlags: [][]string{{"--hint-policy", "off"}},
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

// hintFlags are the router flags that fix figures of the cost policy; none
// unless given: the router learns them.
func (o *Options) hintFlags() []string {
	var f []string
	if o.HintBandwidthGbps > 0 {
		f = append(f, "--hint-bandwidth-gbps", fmtFloat(o.HintBandwidthGbps), "--kv-bytes-per-token", strconv.Itoa(o.KVBytesPerToken))
	}
	if o.HintSetup > 0 {
		f = append(f, "--hint-setup-ms", fmtFloat(ms(o.HintSetup)))
	}
	return f
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', 6, 64) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

// finish sorts a repeat's runs into the canonical order and computes its
// ratios.
func (r *RepeatRun) finish(policies []Policy) {
	r.runs = nil
	for _, p := range policies {
		if s, ok := r.Policies[p.Name]; ok {
			r.runs = append(r.runs, s)
		}
	}
	r.Ratios = loadgen.NewReport("", r.runs, Reference).Ratios
}

// finish reduces the repeats: medians per policy and figure, ratios of the
// medians, comparisons against the spread, and the policies' details added
// up.
func (res *Result) finish(workloadName string, policies []Policy) {
	res.runs = nil
	for _, p := range policies {
		var each []loadgen.NamedSummary
		for _, run := range res.Runs {
			if s, ok := run.Policies[p.Name]; ok {
				each = append(each, s)
			}
		}
		if len(each) == 0 {
			continue
		}
		m := medianSummary(each)
		m.Name = p.Name
		res.runs = append(res.runs, m)
		res.Config.Order = append(res.Config.Order, p.Name)
		var total PolicyRun
		for _, run := range res.Runs {
			total = total.add(run.Details[p.Name])
		}
		res.Config.Policies[p.Name] = total
	}
	res.Report = loadgen.NewReport(workloadName, res.runs, Reference)
	res.Comparisons = map[string]Comparison{}
	for _, other := range res.runs {
		if other.Name == Reference {
			continue
		}
		if c, ok := res.compare(other.Name); ok {
			res.Comparisons[Reference+"_ttft_p90_vs_"+other.Name] = c
		}
	}
}

// compare weighs the reference's TTFT p90 against other's over the
// repeats.
func (res *Result) compare(other string) (Comparison, bool) {
	ref, oth := res.Report.Policies[Reference], res.Report.Policies[other]
	if ref.TTFTP90 <= 0 || oth.TTFTP90 <= 0 {
		return Comparison{}, false
	}
	c := Comparison{Ratio: ref.TTFTP90 / oth.TTFTP90, DifferenceMS: math.Abs(ref.TTFTP90 - oth.TTFTP90)}
	var ratios, refs, others []float64
	for _, run := range res.Runs {
		if x, ok := run.Ratios[Reference+"_ttft_p90_vs_"+other]; ok {
			ratios = append(ratios, x)
		}
		refs = append(refs, run.Policies[Reference].TTFTP90)
		others = append(others, run.Policies[other].TTFTP90)
	}
	if len(ratios) > 0 {
		c.RatioMedian, c.RatioMin, c.RatioMax = median(ratios), slices.Min(ratios), slices.Max(ratios)
	}
	c.SpreadMS = max(spread(refs), spread(others))
	c.Conclusive = c.DifferenceMS > c.SpreadMS
	return c, true
}

func spread(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return slices.Max(v) - slices.Min(v)
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// medianSummary is every figure's median over runs (integers stay
// integers, rounded), with the runs' TTFTs pooled for the plot.
func medianSummary(runs []loadgen.NamedSummary) loadgen.NamedSummary {
	if len(runs) == 1 {
		return runs[0]
	}
	values := map[string][]float64{}
	ints := map[string]bool{}
	for _, r := range runs {
		b, _ := json.Marshal(r)
		var m map[string]json.Number
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		if d.Decode(&m) != nil {
			continue
		}
		for k, n := range m {
			f, err := n.Float64()
			if err != nil {
				continue
			}
			if _, seen := ints[k]; !seen {
				ints[k] = true
			}
			ints[k] = ints[k] && !strings.ContainsAny(n.String(), ".eE")
			values[k] = append(values[k], f)
		}
	}
	out := map[string]float64{}
	for k, v := range values {
		out[k] = median(v)
		if ints[k] {
			out[k] = math.Round(out[k])
		}
	}
	b, _ := json.Marshal(out)
	var m loadgen.NamedSummary
	_ = json.Unmarshal(b, &m)
	for _, r := range runs {
		m.TTFT = append(m.TTFT, r.TTFT...)
	}
	slices.Sort(m.TTFT)
	return m
}

// add sums two runs' counts; the flags are the same.
func (p PolicyRun) add(q PolicyRun) PolicyRun {
	if p.Flags == nil {
		p.Flags = q.Flags
	}
	if p.HintReasons == nil {
		p.HintReasons = map[string]int64{}
	}
	for k, n := range q.HintReasons {
		p.HintReasons[k] += n
	}
	if p.Pulls+q.Pulls > 0 {
		p.PullMSMean = (p.PullMSMean*float64(p.Pulls) + q.PullMSMean*float64(q.Pulls)) / float64(p.Pulls+q.Pulls)
	}
	p.WallMS += q.WallMS
	p.Pulls += q.Pulls
	p.PullsFailed += q.PullsFailed
	if p.FirstError == "" {
		p.FirstError = q.FirstError
	}
	p.LoadAvg = q.LoadAvg
	if q.Learned != nil {
		p.Learned = q.Learned
	}
	return p
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
	fmt.Fprintf(&b, "\n%s workload: %d requests, %d prompt tokens, on %d engines (%d-token blocks of %d KiB, %d GPU + %d runner blocks, prefill %.0f µs/token, speedup %g)",
		r.Workload, c.Requests, c.PromptTokens, c.Engines, c.BlockSize, c.BlockBytes>>10, c.GPUBlocks, c.RunnerBlocks, c.PrefillUSPerToken, c.Speedup)
	if c.Repeats > 1 && len(r.Runs) > 0 {
		fmt.Fprintf(&b, "; %d repeats (seeds %d..%d): medians, [min, max]", c.Repeats, r.Runs[0].Seed, r.Runs[len(r.Runs)-1].Seed)
	}
	b.WriteString("\n\n")
	if c.Repeats > 1 {
		if err := repeatsTable(&b, r); err != nil {
			return err
		}
	} else if err := loadgen.Table(&b, r.runs); err != nil {
		return err
	}
	b.WriteByte('\n')
	if len(r.runs) > 0 && r.runs[0].Summary.Warmup > 0 {
		fmt.Fprintf(&b, "Each policy also sent %d warm-up requests, not measured: the first on each shared system prompt, computed cold under every policy.\n\n",
			r.runs[0].Summary.Warmup)
	}
	for _, o := range r.runs {
		cmp, ok := r.Comparisons[Reference+"_ttft_p90_vs_"+o.Name]
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "%s ttft p90 vs %s: %.2fx", Reference, o.Name, cmp.Ratio)
		if c.Repeats > 1 {
			fmt.Fprintf(&b, " (per repeat: median %.2fx, %.2fx..%.2fx)", cmp.RatioMedian, cmp.RatioMin, cmp.RatioMax)
			if !cmp.Conclusive {
				fmt.Fprintf(&b, "; not conclusive: the runs spread over %.0f ms, more than the %.0f ms between the medians", cmp.SpreadMS, cmp.DifferenceMS)
			}
		}
		b.WriteByte('\n')
	}
	for _, name := range c.Order {
		if p := c.Policies[name]; p.Pulls > 0 {
			fmt.Fprintf(&b, "%s: %d peer pulls, %.1f ms each on average, %d brought fewer blocks than hinted\n",
				name, p.Pulls, p.PullMSMean, p.PullsFailed)
		}
	}
	for _, run := range r.Runs {
		for _, name := range run.Order {
			if l := run.Details[name].Learned; l != nil {
				fmt.Fprintf(&b, "%s (seed %d) learned: %s\n", name, run.Seed, learnedSummary(l))
			}
		}
	}
	n := c.Nominal
	fmt.Fprintf(&b, "the engines: recompute %.4g tokens/s, pull setup %.1f ms, restore %.2f µs/token (wall time); router hint flags: %s\n",
		n.PrefillTokensPerS, n.PullSetupMS, n.RestoreUSPerToken, orNone(c.HintFlags))
	fmt.Fprintf(&b, "load average before %s, after %s\n", orNA(c.LoadAvgStart), orNA(c.LoadAvgEnd))
	if c.Plot != "" {
		fmt.Fprintf(&b, "TTFT CDF per policy: %s\n", c.Plot)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// repeatsTable writes the medians with the range of the figures that
// decide a comparison.
func repeatsTable(b *strings.Builder, r *Result) error {
	rows := [][]string{{"policy", "requests", "errors", "ttft p50 ms", "p90 ms [min, max]", "p99 ms", "recomputed [min, max]",
		"peer restored", "hints"}}
	for _, m := range r.runs {
		var p90, rec []float64
		for _, run := range r.Runs {
			if s, ok := run.Policies[m.Name]; ok {
				p90 = append(p90, s.TTFTP90)
				rec = append(rec, float64(s.RecomputedTokens))
			}
		}
		rows = append(rows, []string{m.Name, strconv.Itoa(m.Requests), strconv.Itoa(m.Errors),
			fixed1(m.TTFTP50),
			fmt.Sprintf("%s [%s, %s]", fixed1(m.TTFTP90), fixed1(slices.Min(p90)), fixed1(slices.Max(p90))),
			fixed1(m.TTFTP99),
			fmt.Sprintf("%d [%.0f, %.0f]", m.RecomputedTokens, slices.Min(rec), slices.Max(rec)),
			fmt.Sprintf("%.1f%%", 100*m.PeerRestoredRatio), strconv.FormatInt(m.HintsIssued, 10)})
	}
	return loadgen.Columns(b, rows)
}

func fixed1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// learnedSummary is a router's learned estimates in one line.
func learnedSummary(raw json.RawMessage) string {
	var v struct {
		FleetPull struct {
			SetupMS            float64  `json:"setup_ms"`
			USPerToken         float64  `json:"us_per_token"`
			BandwidthBytesPerS *float64 `json:"bandwidth_bytes_per_s"`
		} `json:"fleet_pull"`
		FleetRecompute struct {
			TokensPerS float64 `json:"tokens_per_s"`
		} `json:"fleet_recompute"`
		Pairs []struct {
			Pulls int `json:"pulls"`
		} `json:"pairs"`
		Targets []struct {
			TokensPerS float64 `json:"tokens_per_s"`
		} `json:"targets"`
	}
	if json.Unmarshal(raw, &v) != nil {
		return "unreadable"
	}
	p := v.FleetPull
	gbps := "free"
	if p.BandwidthBytesPerS != nil {
		gbps = fmt.Sprintf("%.2f Gbit/s", *p.BandwidthBytesPerS*8/1e9)
	}
	pulls := 0
	for _, pr := range v.Pairs {
		pulls += pr.Pulls
	}
	var rates []string
	for _, t := range v.Targets {
		rates = append(rates, fmt.Sprintf("%.4g", t.TokensPerS))
	}
	return fmt.Sprintf("fleet pull %.1f ms + %.2f µs/token (%s) from %d pulls over %d pairs; recompute %.4g tokens/s fleet-wide, per target [%s]",
		p.SetupMS, p.USPerToken, gbps, pulls, len(v.Pairs), v.FleetRecompute.TokensPerS, strings.Join(rates, " "))
}

func orNone(f []string) string {
	if len(f) == 0 {
		return "none (learned)"
	}
	return strings.Join(f, " ")
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
