// This file holds `kvrouter bench routing --pd`: aggregated against disaggregated and conditional serving on the same engine count.

package policybench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"kvrouter/internal/cluster"
	"kvrouter/internal/loadgen"
	"kvrouter/internal/mocker"
	"kvrouter/internal/router"
	"kvrouter/internal/workload"
)

// Serving modes --pd compares, in the order they run.
const (
	ModeAggregated    = "aggregated"    // every engine serves whole requests
	ModeDisaggregated = "disaggregated" // one prefill engine, the others decode; every request in two legs
	ModeConditional   = "conditional"   // the same fleet; a decode worker holding all but a short rest runs it alone
)

// pdRouterFlags: KV-aware routing without hints in every mode, so that
// only the serving mode differs.
var pdRouterFlags = []string{"--routing", "kv", "--hint-policy", "off"}

// PDOptions configure a --pd run: the engines and workload of Options,
// the flavour (SGLang's decode servers cannot run a request alone, so its
// conditional mode is its disaggregated one and is not run) and the
// conditional threshold.
type PDOptions struct {
	Options
	Flavor string
	// LocalPrefillTokens is the conditional mode's
	// --pd-local-prefill-tokens; 0 takes serve's default.
	LocalPrefillTokens int
}

// PDRun is one mode's figures.
type PDRun struct {
	Mode   string   `json:"mode"`
	Roles  []string `json:"roles"`
	Flags  []string `json:"router_flags"`
	WallMS float64  `json:"wall_ms"`
	loadgen.Summary
	// ITLP50 and ITLP90 are percentiles over requests of their mean
	// inter-token latency, (e2e - TTFT) / (output tokens - 1), ms.
	ITLP50 float64 `json:"itl_p50_ms"`
	ITLP90 float64 `json:"itl_p90_ms"`
	// PrefillLegs, SkippedPrefillLegs and Fallbacks are the router's
	// counters (zero when aggregated).
	PrefillLegs        int `json:"prefill_legs"`
	SkippedPrefillLegs int `json:"skipped_prefill_legs"`
	Fallbacks          int `json:"fallbacks"`
}

// PDResult is a --pd run's report.
type PDResult struct {
	Flavor       string  `json:"flavor"`
	Engines      int     `json:"engines"`
	Runs         []PDRun `json:"runs"`
	Config       Config  `json:"config"`
	LoadAvgStart string  `json:"loadavg_start"`
	LoadAvgEnd   string  `json:"loadavg_end"`
}

// RunPD runs the workload in each serving mode on the same number of
// engines: aggregated on one cluster, then disaggregated and conditional
// on another of one prefill and Engines-1 decode engines, reset between
// the two. It prints the table (and the JSON with Options.JSON).
func RunPD(ctx context.Context, o PDOptions) (PDResult, error) {
	o.fill()
	if o.Flavor == "" {
		o.Flavor = "vllm"
	}
	if err := o.check(); err != nil {
		return PDResult{}, err
	}
	if o.Flavor != "vllm" && o.Flavor != "sglang" {
		return PDResult{}, fmt.Errorf("%w: --flavor %q, want vllm or sglang", ErrOptions, o.Flavor)
	}
	threshold := o.LocalPrefillTokens
	if threshold == 0 {
		threshold = router.DefaultPD().LocalPrefillTokens
	}
	reqs, wcfg, err := o.requests()
	if err != nil {
		return PDResult{}, err
	}
	res := PDResult{Flavor: o.Flavor, Engines: o.Engines, Config: o.config(wcfg, reqs), LoadAvgStart: loadAvg()}
	split := make([]string, o.Engines)
	split[0] = mocker.RolePrefill
	for i := 1; i < len(split); i++ {
		split[i] = mocker.RoleDecode
	}
	agg := slices.Clone(pdRouterFlags)
	disagg := append(slices.Clone(pdRouterFlags), "--pd-local-prefill-tokens", "0")
	cond := append(slices.Clone(pdRouterFlags), "--pd-local-prefill-tokens", strconv.Itoa(threshold))
	run, err := o.pdCluster(ctx, ModeAggregated, nil, [][]string{agg}, reqs)
	res.Runs = append(res.Runs, run...)
	if err != nil {
		return res, err
	}
	modes := [][]string{disagg, cond}
	if o.Flavor == "sglang" {
		fmt.Fprintln(o.Err, "sglang: its decode servers cannot run a request alone; conditional is disaggregated, not run")
		modes = modes[:1]
	}
	run, err = o.pdCluster(ctx, ModeDisaggregated, split, modes, reqs)
	res.Runs = append(res.Runs, run...)
	if err != nil {
		return res, err
	}
	res.LoadAvgEnd = loadAvg()
	return res, o.printPD(&res)
}

// pdCluster starts a cluster of the roles and runs the workload through
// one fresh router per flag set, resetting the engines in between.
func (o *PDOptions) pdCluster(ctx context.Context, first string, roles []string, flags [][]string, reqs []workload.Request) ([]PDRun, error) {
	co := o.clusterOptions()
	co.Flavor, co.Roles, co.RouterFlags = o.Flavor, roles, flags[:1]
	desc := fmt.Sprintf("%d %s engines", o.Engines, o.Flavor)
	if roles != nil {
		desc = fmt.Sprintf("one %s prefill and %d decode engines", o.Flavor, o.Engines-1)
	}
	fmt.Fprintf(o.Err, "starting %s (with their state agents) and a router...\n", desc)
	c, err := cluster.Start(ctx, co)
	if err != nil {
		return nil, err
	}
	var runs []PDRun
	err = func() error {
		r := c.Routers()[0]
		for i, f := range flags {
			mode := first
			if i == 1 {
				mode = ModeConditional
			}
			if i > 0 {
				if err := c.StopRouter(r); err != nil {
					return err
				}
				if err := resetEngines(ctx, c.Engines()); err != nil {
					return err
				}
				if r, err = c.AddRouter(ctx, f); err != nil {
					return err
				}
				if err := awaitEmpty(ctx, r.Admin, c.Engines()); err != nil {
					return err
				}
			}
			run, err := o.pdRun(ctx, mode, r.URL, r.Admin, reqs)
			run.Roles, run.Flags = roles, f
			if run.Roles == nil {
				run.Roles = slices.Repeat([]string{mocker.RoleAggregated}, o.Engines)
			}
			runs = append(runs, run)
			if err != nil {
				return fmt.Errorf("%s: %w", mode, err)
			}
		}
		return nil
	}()
	if serr := c.Stop(); serr != nil {
		err = errors.Join(err, serr)
	}
	if err == nil && o.LogDir == "" {
		os.RemoveAll(c.LogDir())
	}
	if err != nil {
		return runs, fmt.Errorf("%w (logs in %s)", err, c.LogDir())
	}
	return runs, nil
}

func (o *PDOptions) pdRun(ctx context.Context, mode, routerURL, adminURL string, reqs []workload.Request) (PDRun, error) {
	fmt.Fprintf(o.Err, "%s: sending %d requests through %s\n", mode, len(reqs), routerURL)
	d := loadgen.Driver{BaseURL: routerURL, Model: cluster.Model, IgnoreEOS: true}
	out, err := d.Run(ctx, reqs, loadgen.Progress(prefixCR{o.Err, mode + " "}, len(reqs), o.TTY, nil))
	if err != nil {
		return PDRun{Mode: mode}, err
	}
	run := PDRun{Mode: mode, WallMS: float64(out.Wall.Microseconds()) / 1e3, Summary: out.Summary()}
	run.ITLP50, run.ITLP90 = itl(out.Records)
	m, err := scrape(ctx, adminURL)
	if err != nil {
		return run, err
	}
	run.PrefillLegs = int(m.Sum("kvrouter_pd_legs_total", map[string]string{"leg": "prefill"}))
	run.SkippedPrefillLegs = int(m.Sum("kvrouter_pd_prefill_skipped_total", nil))
	run.Fallbacks = int(m.Sum("kvrouter_pd_fallbacks_total", nil))
	fmt.Fprintf(o.Err, "%s: %d requests in %.1fs, %d errors, TTFT p50 %.1f ms p90 %.1f ms, ITL p50 %.1f ms p90 %.1f ms, %d prefill legs, %d skipped\n",
		mode, run.Requests, run.WallMS/1e3, run.Errors, run.TTFTP50, run.TTFTP90, run.ITLP50, run.ITLP90, run.PrefillLegs, run.SkippedPrefillLegs)
	return run, nil
}

// itl is the p50 and p90, over measured requests with at least two output
// tokens, of each one's mean inter-token latency in ms.
func itl(recs []loadgen.Record) (p50, p90 float64) {
	var v []float64
	for _, r := range recs {
		if r.Warmup || r.Err != nil || r.Usage.CompletionTokens < 2 {
			continue
		}
		v = append(v, float64((r.E2E-r.TTFT).Microseconds())/1e3/float64(r.Usage.CompletionTokens-1))
	}
	slices.Sort(v)
	return loadgen.Percentile(v, 50), loadgen.Percentile(v, 90)
}

func (o *PDOptions) printPD(res *PDResult) error {
	out := o.Out
	if o.JSON {
		enc := json.NewEncoder(o.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
		out = o.Err
	}
	return pdTable(out, res)
}

func pdTable(w io.Writer, res *PDResult) error {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%s, %d engines; TTFT and ITL (mean inter-token latency per request) in ms\n\n", res.Flavor, res.Engines)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\trequests\terrors\tTTFT p50\tTTFT p90\tITL p50\tITL p90\te2e p50\tout tok/s\tprefill legs\tskipped\t")
	for _, r := range res.Runs {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%.1f\t%.2f\t%.2f\t%.0f\t%.1f\t%d\t%d\t\n", r.Mode, r.Requests, r.Errors,
			r.TTFTP50, r.TTFTP90, r.ITLP50, r.ITLP90, r.E2EP50, r.OutputTokensPerS, r.PrefillLegs, r.SkippedPrefillLegs)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(&b, "\nload average %s at the start, %s at the end\n", res.LoadAvgStart, res.LoadAvgEnd)
	_, err := io.WriteString(w, b.String())
	return err
}
