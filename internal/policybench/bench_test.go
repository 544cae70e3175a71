package policybench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"kvrouter/internal/cluster/clustertest"
	"kvrouter/internal/workload"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// testCtx bounds a test against hangs; it is not a timing assertion.
func testCtx(t *testing.T) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx, cancel
}

// tiny is a run of two small engines at ten times the speed and a few
// requests: large enough for prefixes to be shared and pulled. It skips t
// under -short.
func tiny(t *testing.T, policies ...string) Options {
	return Options{
		Binary: clustertest.Binary(t), Engines: 2, GPUBlocks: 64, RunnerBlocks: 256, KVBytesPerToken: 4 << 10,
		// No simulated pull setup: the prompts are far shorter than the
		// preset's crossover, and these tests want pulls.
		PullSetup: -1, Speedup: 10,
		Agentic: workload.AgenticConfig{
			Sessions: 4, Turns: 2, SystemPrompts: 1, SystemTokensMin: 512, SystemTokensMax: 768,
			UserTokens: 64, OutputTokens: 4, ThinkTime: 50 * time.Millisecond,
			BurstSize: 2, BurstInterval: 200 * time.Millisecond, ArrivalRate: 10, Seed: 3,
		},
		Policies: policies,
		LogDir:   t.TempDir(),
	}
}

// TestTinyRun runs two policies for real and checks the report's shape:
// every figure the JSON promises, for every policy, over the same
// requests; the calibration measured; the plot written; nothing left
// running.
func TestTinyRun(t *testing.T) {
	o := tiny(t, "kv", "kv_hints")
	ctx, _ := testCtx(t)
	var out, errs bytes.Buffer
	o.JSON, o.Out, o.Err = true, &out, &errs
	o.Plot = filepath.Join(t.TempDir(), "ttft.svg")
	o.Records = t.TempDir()
	res, err := Run(ctx, o)
	if err != nil {
		t.Fatalf("Run: %v\nstderr:\n%s", err, errs.String())
	}
	assertNoChildren(t)
	filled := o
	filled.fill() // as Run does
	want, err := workload.Agentic(withVocab(filled.Agentic))
	if err != nil {
		t.Fatal(err)
	}

	var report struct {
		Workload string                                `json:"workload"`
		Policies map[string]map[string]json.RawMessage `json:"policies"`
		Ratios   map[string]float64                    `json:"ratios"`
		Config   struct {
			Requests  int                  `json:"requests"`
			Order     []string             `json:"order"`
			HintFlags []string             `json:"hint_flags"`
			Policies  map[string]PolicyRun `json:"policies"`
		} `json:"config"`
	}
	if err := json.Unmarshal(out.Bytes(), &report); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out.String())
	}
	if report.Workload != WorkloadAgentic || report.Config.Requests != len(want) {
		t.Fatalf("workload %q with %d requests, want agentic with %d", report.Workload, report.Config.Requests, len(want))
	}
	if got := strings.Join(report.Config.Order, ","); got != "kv,kv_hints" {
		t.Fatalf("order %s", got)
	}
	fields := []string{"requests", "errors", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "e2e_p50_ms",
		"output_tokens_per_s", "local_hit_ratio", "peer_restored_ratio", "recomputed_tokens", "hints_issued", "hints_skipped"}
	for _, name := range []string{"kv", "kv_hints"} {
		p, ok := report.Policies[name]
		if !ok {
			t.Fatalf("no policy %s in %s", name, out.String())
		}
		num := map[string]float64{}
		for _, f := range fields {
			raw, ok := p[f]
			if !ok {
				t.Fatalf("%s: no %s", name, f)
			}
			v, err := strconv.ParseFloat(string(raw), 64)
			if err != nil {
				t.Fatalf("%s.%s = %s: %v", name, f, raw, err)
			}
			num[f] = v
		}
		// Every policy ran the whole workload, without a failure; the
		// warm-ups are sent but not measured.
		warm := 0
		for _, r := range want {
			if r.Warmup {
				warm++
			}
		}
		if int(num["requests"]) != len(want)-warm || num["errors"] != 0 {
			t.Fatalf("%s: %v requests, %v errors; want %d and 0 (first error %q)", name, num["requests"], num["errors"],
				len(want)-warm, report.Config.Policies[name].FirstError)
		}
		if got, _ := strconv.Atoi(string(p["warmup_requests"])); got != warm {
			t.Fatalf("%s: %s warm-up requests reported, want %d", name, p["warmup_requests"], warm)
		}
		if !(num["ttft_p50_ms"] > 0 && num["ttft_p50_ms"] <= num["ttft_p90_ms"] && num["ttft_p90_ms"] <= num["ttft_p99_ms"]) {
			t.Fatalf("%s: TTFT percentiles %v, %v, %v out of order", name, num["ttft_p50_ms"], num["ttft_p90_ms"], num["ttft_p99_ms"])
		}
		if r := num["local_hit_ratio"] + num["peer_restored_ratio"]; r <= 0 || r > 1 {
			t.Fatalf("%s: hit ratios %v + %v", name, num["local_hit_ratio"], num["peer_restored_ratio"])
		}
	}
	// The hint-less router never hints; its decisions are all "disabled".
	kv := report.Config.Policies["kv"]
	if got := string(report.Policies["kv"]["hints_issued"]); got != "0" || kv.HintReasons["disabled"] != int64(len(want)) {
		t.Fatalf("kv: hints issued %s, reasons %v", got, kv.HintReasons)
	}
	if kv.Pulls != 0 {
		t.Fatalf("kv: %d peer pulls without a hint", kv.Pulls)
	}
	kvh := report.Config.Policies["kv_hints"]
	if issued, _ := strconv.Atoi(string(report.Policies["kv_hints"]["hints_issued"])); kvh.Pulls > issued || kvh.PullsFailed > kvh.Pulls {
		t.Fatalf("kv_hints: %d pulls (%d failed) for %d hints", kvh.Pulls, kvh.PullsFailed, issued)
	}
	if !slices.Contains(report.Config.Policies["kv_hints"].Flags, "cost") {
		t.Fatalf("kv_hints flags %q", report.Config.Policies["kv_hints"].Flags)
	}
	if _, ok := report.Ratios["kv_hints_ttft_p90_vs_kv"]; !ok || len(report.Ratios) != 1 {
		t.Fatalf("ratios %v, want kv_hints_ttft_p90_vs_kv alone", report.Ratios)
	}
	// No hint flag: the router learned what it hinted on, and says so.
	if len(report.Config.HintFlags) != 0 || len(kvh.Learned) == 0 {
		t.Fatalf("kv_hints: hint flags %q, learned %s", report.Config.HintFlags, kvh.Learned)
	}
	svg, err := os.ReadFile(o.Plot)
	if err != nil || !bytes.HasPrefix(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("kv_hints")) {
		t.Fatalf("plot %s: %v\n%.200s", o.Plot, err, svg)
	}

	// --records: a line per request of each policy, the same requests.
	for _, name := range []string{"kv", "kv_hints"} {
		b, err := os.ReadFile(filepath.Join(o.Records, name+".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]bool{}
		for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
			var r record
			if err := json.Unmarshal(line, &r); err != nil {
				t.Fatalf("%s records: %v", name, err)
			}
			ids[r.ID] = true
		}
		for _, r := range want {
			if !ids[r.ID] {
				t.Fatalf("%s records lack %s", name, r.ID)
			}
		}
	}

	// The people's table, on stderr with --json.
	table := errs
	if _, ok := res.Report.Policies["kv"]; !ok {
		t.Fatalf("Run's result lacks kv")
	}
	for _, s := range []string{"kv_hints ttft p90 vs kv:", "\nkv ", "\nkv_hints ", "kv_hints (seed 3) learned: fleet pull"} {
		if !strings.Contains(table.String(), s) {
			t.Fatalf("table lacks %q:\n%s", s, table.String())
		}
	}
}

// TestCancelStopsEverything interrupts a run as soon as its first policy
// starts sending, as Ctrl-C would, and checks that every process is gone.
func TestCancelStopsEverything(t *testing.T) {
	o := tiny(t, "round_robin", "kv")
	ctx, cancel := testCtx(t)
	o.Err = &cancelOn{match: "round_robin: sending", cancel: cancel}
	_, err := Run(ctx, o)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after cancel: %v, want context.Canceled", err)
	}
	assertNoChildren(t)
}

// cancelOn cancels when what was written contains match.
type cancelOn struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	match  string
	cancel context.CancelFunc
}

func (c *cancelOn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Write(b)
	if strings.Contains(c.buf.String(), c.match) {
		c.cancel()
	}
	return len(b), nil
}

// assertNoChildren fails when a process started by this test process
// still exists (Linux, which tells parents in /proc).
func assertNoChildren(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		return
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	me := os.Getpid()
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...; comm may hold spaces.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(me) {
			t.Errorf("child process left running: %s", strings.TrimSpace(s[:min(len(s), 120)]))
		}
	}
}

func withVocab(w workload.AgenticConfig) workload.AgenticConfig {
	w.Vocab = demoVocab
	return w
}
