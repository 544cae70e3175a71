package policybench

import (
	"strings"
	"testing"
	"time"

	"kvrouter/internal/loadgen"
)

// TestITL: a request's inter-token latency is its time after the first
// token over the tokens after the first; failed, warm-up and one-token
// requests have none.
func TestITL(t *testing.T) {
	rec := func(ttft, e2e time.Duration, tokens int) loadgen.Record {
		return loadgen.Record{TTFT: ttft, E2E: e2e, Usage: loadgen.Usage{CompletionTokens: tokens}}
	}
	recs := []loadgen.Record{
		rec(100*time.Millisecond, 190*time.Millisecond, 10), // 10 ms
		rec(50*time.Millisecond, 250*time.Millisecond, 11),  // 20 ms
		rec(10*time.Millisecond, 20*time.Millisecond, 1),    // one token: none
		{TTFT: time.Millisecond, E2E: time.Second, Usage: loadgen.Usage{CompletionTokens: 5}, Warmup: true},
		{TTFT: time.Millisecond, E2E: time.Second, Usage: loadgen.Usage{CompletionTokens: 5}, Err: errTest},
	}
	p50, p90 := itl(recs)
	if p50 < 10 || p50 > 20 || p90 < p50 || p90 > 20 {
		t.Fatalf("itl p50 %v p90 %v, want within [10, 20] ms", p50, p90)
	}
	if p50, p90 := itl(recs[2:]); p50 != 0 || p90 != 0 {
		t.Fatalf("itl of nothing measurable: %v %v", p50, p90)
	}
}

type testErr struct{}

func (testErr) Error() string { return "failed" }

var errTest = testErr{}

func TestPDTable(t *testing.T) {
	var b strings.Builder
	res := &PDResult{Flavor: "vllm", Engines: 3, LoadAvgStart: "1.00 1.00 1.00", LoadAvgEnd: "2.00 1.50 1.00", Runs: []PDRun{
		{Mode: ModeAggregated, Summary: loadgen.Summary{Requests: 10, TTFTP50: 12.5}, ITLP50: 30},
		{Mode: ModeDisaggregated, Summary: loadgen.Summary{Requests: 10, TTFTP50: 20}, ITLP50: 10, PrefillLegs: 10},
	}}
	if err := pdTable(&b, res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"aggregated", "disaggregated", "12.5", "30.00", "load average 1.00 1.00 1.00"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}
