package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"kvrouter/internal/cluster/clustertest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// testCtx bounds a test against hangs; it is not a timing assertion.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestSeedScenario runs `kvrouter demo --scenario seed --json` as a user
// would and checks its verdict: B restored A's prefix with the same
// output, the router's hint named A's runner, and after the eviction the
// router attaches no hint.
func TestSeedScenario(t *testing.T) {
	bin := clustertest.Binary(t)
	for _, flavor := range []string{"sglang", "vllm"} {
		t.Run(flavor, func(t *testing.T) {
			t.Parallel() // two demos, two clusters: nothing shared
			logs := t.TempDir()
			cmd := exec.CommandContext(testCtx(t), bin, "demo", "--scenario", "seed", "--json",
				"--flavor", flavor, "--log-dir", logs)
			// On a hang the demo is interrupted so that it stops its
			// cluster; its children die with it anyway (Pdeathsig).
			cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
			cmd.WaitDelay = 20 * time.Second
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("demo --scenario seed: %v\nstdout: %s\nstderr: %s\n%s", err, stdout.String(), stderr.String(), dumpLogs(logs))
			}
			if n := strings.Count(strings.TrimSpace(stdout.String()), "\n"); n != 0 {
				t.Fatalf("--json printed %d lines, want one object:\n%s", n+1, stdout.String())
			}
			var res struct {
				RestoredTokens        *int            `json:"restored_tokens"`
				OutputMatch           *bool           `json:"output_match"`
				PeerHintAfterEviction *bool           `json:"peer_hint_after_eviction"`
				Hint                  json.RawMessage `json:"hint"`
				Steps                 []struct {
					Step   string          `json:"step"`
					OK     *bool           `json:"ok"`
					MS     float64         `json:"ms"`
					Detail json.RawMessage `json:"detail"`
				} `json:"steps"`
			}
			dec := json.NewDecoder(&stdout)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&res); err != nil {
				t.Fatalf("output: %v", err)
			}
			switch {
			case res.RestoredTokens == nil || *res.RestoredTokens < SeedMinRestored:
				t.Errorf("restored_tokens %v, want at least %d", res.RestoredTokens, SeedMinRestored)
			case res.OutputMatch == nil || !*res.OutputMatch:
				t.Errorf("output_match %v, want true", res.OutputMatch)
			case res.PeerHintAfterEviction == nil || *res.PeerHintAfterEviction:
				t.Errorf("peer_hint_after_eviction %v, want false", res.PeerHintAfterEviction)
			}
			p, err := hintPayload(res.Hint)
			if err != nil {
				t.Fatalf("hint: %v", err)
			}
			var start struct {
				A, B string
			}
			wantSteps := []string{"start_cluster", "prefill_on_A", "router_hint_for_B", "restore_on_B",
				"evict_A_and_B", "no_hint_after_eviction", "recompute_on_B"}
			if len(res.Steps) != len(wantSteps) {
				t.Fatalf("%d steps, want %v", len(res.Steps), wantSteps)
			}
			for i, s := range res.Steps {
				if s.Step != wantSteps[i] || s.OK == nil || !*s.OK {
					t.Errorf("step %d: %s ok=%v, want %s ok", i, s.Step, s.OK, wantSteps[i])
				}
			}
			if err := json.Unmarshal(res.Steps[0].Detail, &start); err != nil {
				t.Fatal(err)
			}
			if p.Source != start.A || p.Source == start.B || len(p.Blocks) != SeedPromptLen/SeedBlockSize {
				t.Errorf("hint names %s with %d blocks, want A's runner %s with %d", p.Source, len(p.Blocks), start.A, SeedPromptLen/SeedBlockSize)
			}
		})
	}
}

// TestTenantsScenario runs `kvrouter demo --scenario tenants --json` as a
// user would and checks its verdict for both flavours: no hint and no
// restored token crossed tenants, and salted tenants still restored their
// own prefixes from peers.
func TestTenantsScenario(t *testing.T) {
	bin := clustertest.Binary(t)
	logs := t.TempDir()
	cmd := exec.CommandContext(testCtx(t), bin, "demo", "--scenario", "tenants", "--json", "--log-dir", logs)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 20 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	if n := strings.Count(strings.TrimSpace(stdout.String()), "\n"); n != 0 {
		t.Fatalf("--json printed %d lines, want one object (err %v):\n%s\nstderr: %s", n+1, runErr, stdout.String(), stderr.String())
	}
	var res struct {
		Flavours map[string]struct {
			Requests                  *int   `json:"requests"`
			Errors                    *int   `json:"errors"`
			Hints                     *int   `json:"hints"`
			CrossTenantHints          *int   `json:"cross_tenant_hints"`
			CrossTenantRestoredTokens *int   `json:"cross_tenant_restored_tokens"`
			SameTenantRestoredTokens  *int   `json:"same_tenant_restored_tokens"`
			FirstError                string `json:"first_error"`
			LogDir                    string `json:"log_dir"`
		} `json:"flavours"`
	}
	dec := json.NewDecoder(&stdout)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("output: %v (exit: %v)\nstderr: %s", err, runErr, stderr.String())
	}
	for _, fl := range []string{"vllm", "sglang"} {
		f, ok := res.Flavours[fl]
		if !ok {
			t.Fatalf("no %s in %+v", fl, res.Flavours)
		}
		switch {
		case f.Requests == nil || *f.Requests != 2*len(tenantSteps) || f.Errors == nil || *f.Errors != 0:
			t.Errorf("%s: requests %v, errors %v (%s), want %d and 0\n%s", fl, f.Requests, f.Errors, f.FirstError, 2*len(tenantSteps), dumpLogs(logs))
		case f.CrossTenantHints == nil || *f.CrossTenantHints != 0 || f.CrossTenantRestoredTokens == nil || *f.CrossTenantRestoredTokens != 0:
			t.Errorf("%s: %v cross-tenant hints, %v cross-tenant restored tokens, want 0", fl, f.CrossTenantHints, f.CrossTenantRestoredTokens)
		case f.SameTenantRestoredTokens == nil || *f.SameTenantRestoredTokens <= 0 || f.Hints == nil || *f.Hints == 0:
			t.Errorf("%s: %v tokens restored within tenants on %v hints, want some", fl, f.SameTenantRestoredTokens, f.Hints)
		}
	}
	if runErr != nil && !t.Failed() {
		t.Fatalf("exit: %v\nstderr: %s", runErr, stderr.String())
	}
}

// TestRunWorkload runs a small demo in process and checks the summary
// against what the router counted.
func TestRunWorkload(t *testing.T) {
	bin := clustertest.Binary(t)
	w := Workload()
	w.Sessions, w.Turns, w.BurstSize = 6, 3, 3
	// Short pauses: the checks count requests and cached prefixes, not pacing.
	w.ThinkTime, w.BurstInterval = 100*time.Millisecond, 300*time.Millisecond
	var out, errs bytes.Buffer
	res, err := Run(testCtx(t), Options{Binary: bin, Engines: 2, Workload: w, Speedup: 4, JSON: true, Out: &out, Err: &errs})
	if err != nil {
		t.Fatalf("%v\n%s", err, errs.String())
	}
	defer os.RemoveAll(res.LogDir)
	if want := w.Sessions * w.Turns; res.Requests != want || res.Errors != 0 {
		t.Fatalf("%d requests, %d errors; want %d, 0\n%s", res.Requests, res.Errors, want, errs.String())
	}
	// Every request the router sent has one hint decision, issued or not.
	if got := res.HintsIssued + res.HintsSkipped; got != int64(res.Requests) {
		t.Errorf("router counted %d hint decisions (%d issued) for %d requests", got, res.HintsIssued, res.Requests)
	}
	// Later turns extend earlier prompts: some prefix must be found.
	if res.LocalCachedTokens+res.PeerRestoredTokens == 0 || res.TTFTP50 <= 0 {
		t.Errorf("no cached prefix used (local %d, peer %d) or no TTFT (%v)", res.LocalCachedTokens, res.PeerRestoredTokens, res.TTFTP50)
	}
	var printed Result
	if err := json.Unmarshal(out.Bytes(), &printed); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out.String())
	}
	if printed.Requests != res.Requests || printed.HintsIssued != res.HintsIssued || printed.Router != res.Router {
		t.Errorf("printed %+v, returned %+v", printed, res)
	}
	if _, err := os.Stat(res.LogDir); err != nil {
		t.Errorf("logs not kept: %v", err)
	}
}

// TestRunCanceled: interrupting the demo while the workload runs stops
// every process it started.
func TestRunCanceled(t *testing.T) {
	bin := clustertest.Binary(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	w := Workload()
	w.Sessions, w.Turns = 4, 50
	sending := &watch{want: "sending", seen: make(chan struct{})}
	done := make(chan error, 1)
	var res Result
	go func() {
		var err error
		res, err = Run(ctx, Options{Binary: bin, Engines: 1, Workload: w, Err: sending})
		done <- err
	}()
	select {
	case <-sending.seen: // the cluster is up and the workload started
	case err := <-done:
		t.Fatalf("demo ended before sending: %v\n%s", err, sending.String())
	}
	if n := len(running(t, bin)); n != 3 {
		t.Fatalf("%d processes of %s run, want engine, agent and router", n, bin)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after cancel: %v, want context.Canceled", err)
	}
	os.RemoveAll(res.LogDir)
	if pids := running(t, bin); len(pids) > 0 {
		t.Fatalf("processes %v still run %s after the demo was canceled", pids, bin)
	}
}

// watch is a writer that closes seen once want was written.
type watch struct {
	mu   sync.Mutex
	b    strings.Builder
	want string
	seen chan struct{}
	once sync.Once
}

func (w *watch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	if strings.Contains(w.b.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func (w *watch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// running lists the live processes executing path, by their command line.
func running(t *testing.T, path string) []int {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Skip("no /proc to list processes")
	}
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if argv0, _, _ := strings.Cut(string(b), "\x00"); argv0 == path {
			pids = append(pids, pid)
		}
	}
	return pids
}

func dumpLogs(dir string) string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, f := range files {
		data, _ := os.ReadFile(f)
		fmt.Fprintf(&b, "== %s\n%s\n", filepath.Base(f), data)
	}
	return b.String()
}

// TestPDScenario runs `kvrouter demo --scenario pd --json` as a user would:
// per flavour every request answered, each answer an aggregated engine's,
// prefill legs sent and the KV pulled by the decode workers; vLLM's decode
// workers run follow-up turns alone, SGLang's cannot.
func TestPDScenario(t *testing.T) {
	bin := clustertest.Binary(t)
	logs := t.TempDir()
	cmd := exec.CommandContext(testCtx(t), bin, "demo", "--scenario", "pd", "--json", "--log-dir", logs)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 20 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("demo --scenario pd: %v\nstdout: %s\nstderr: %s\n%s", err, stdout.String(), stderr.String(), dumpLogs(logs))
	}
	var res struct {
		Flavours map[string]struct {
			Requests                     *int     `json:"requests"`
			Errors                       *int     `json:"errors"`
			PrefillLegs                  *int     `json:"prefill_legs"`
			SkippedPrefillLegs           *int     `json:"skipped_prefill_legs"`
			Fallbacks                    *int     `json:"fallbacks"`
			OutputsIdenticalToAggregated *bool    `json:"outputs_identical_to_aggregated"`
			DecodePulledTokens           *int     `json:"decode_pulled_tokens"`
			TTFTP50MS                    *float64 `json:"ttft_p50_ms"`
			Workers                      []string `json:"workers"`
			LogDir                       string   `json:"log_dir"`
		} `json:"flavours"`
	}
	dec := json.NewDecoder(&stdout)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("output: %v\n%s", err, stdout.String())
	}
	if len(res.Flavours) != 2 {
		t.Fatalf("flavours %v, want vllm and sglang", res.Flavours)
	}
	for flavor, f := range res.Flavours {
		switch {
		case f.Requests == nil || *f.Requests != pdSessions*pdTurns:
			t.Errorf("%s: requests %v, want %d", flavor, f.Requests, pdSessions*pdTurns)
		case f.Errors == nil || *f.Errors != 0:
			t.Errorf("%s: errors %v, want 0", flavor, f.Errors)
		case f.OutputsIdenticalToAggregated == nil || !*f.OutputsIdenticalToAggregated:
			t.Errorf("%s: outputs_identical_to_aggregated %v, want true", flavor, f.OutputsIdenticalToAggregated)
		case f.PrefillLegs == nil || f.SkippedPrefillLegs == nil || *f.PrefillLegs+*f.SkippedPrefillLegs != *f.Requests:
			t.Errorf("%s: %v prefill legs and %v skipped for %d requests", flavor, f.PrefillLegs, f.SkippedPrefillLegs, *f.Requests)
		case *f.PrefillLegs < pdSessions || f.DecodePulledTokens == nil || *f.DecodePulledTokens == 0:
			t.Errorf("%s: %d prefill legs (every first turn has one), %v tokens pulled", flavor, *f.PrefillLegs, f.DecodePulledTokens)
		case f.TTFTP50MS == nil || *f.TTFTP50MS <= 0:
			t.Errorf("%s: ttft_p50_ms %v", flavor, f.TTFTP50MS)
		case flavor == "vllm" && *f.SkippedPrefillLegs == 0:
			t.Errorf("vllm: no follow-up turn ran on its decode worker alone")
		case flavor == "sglang" && *f.SkippedPrefillLegs != 0:
			t.Errorf("sglang: %d prefill legs skipped, which SGLang's decode servers cannot do", *f.SkippedPrefillLegs)
		}
	}
}
