package loadgen

import (
	"bytes"
	"encoding/json"
	"kvrouter/internal/golden"
	"testing"
)

// benchRuns are five policies' figures as a routing benchmark reports
// them; kv_hints comes last, as the reference.
func benchRuns() []NamedSummary {
	s := func(name string, p50, p90, p99, e2e, tps, local, peer float64, recomputed, hints, skipped int64, errs int) NamedSummary {
		return NamedSummary{Name: name, Summary: Summary{
			Requests: 200, Errors: errs, TTFTP50: p50, TTFTP90: p90, TTFTP99: p99, E2EP50: e2e, E2EP90: 2 * e2e,
			OutputTokensPerS: tps, PromptTokens: 1_000_000, OutputTokens: 30_000,
			LocalCachedTokens: int64(local * 1e6), PeerRestoredTokens: int64(peer * 1e6), RecomputedTokens: recomputed,
			LocalHitRatio: local, PeerRestoredRatio: peer,
		}, HintsIssued: hints, HintsSkipped: skipped}
	}
	return []NamedSummary{
		s("round_robin", 180.5, 420, 610.25, 900, 1500.5, 0.21, 0, 790000, 0, 0, 0),
		s("random", 175, 400.75, 650, 880, 1510, 0.2, 0, 800000, 0, 0, 3),
		s("least_loaded", 150, 300, 500, 850, 1580, 0.25, 0, 750000, 0, 0, 0),
		s("kv", 60, 240, 480, 700, 1700, 0.7, 0, 300000, 0, 0, 0),
		s("kv_hints", 55, 168, 300, 650, 1805.125, 0.7, 0.2, 100000, 412, 37, 0),
	}
}

func TestTable(t *testing.T) {
	var buf bytes.Buffer
	if err := Table(&buf, benchRuns()); err != nil {
		t.Fatal(err)
	}
	buf.WriteByte('\n')
	if err := WriteRatios(&buf, benchRuns(), "kv_hints"); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "testdata/golden/table.txt", buf.Bytes())
}

func TestTableAlignsColumns(t *testing.T) {
	runs := benchRuns()
	runs[0].Name = "a"
	runs[1].Requests = 1234567
	var buf bytes.Buffer
	if err := Table(&buf, runs); err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), []byte("\n"))
	if len(lines) != len(runs)+1 {
		t.Fatalf("%d lines for %d runs", len(lines), len(runs))
	}
	for _, l := range lines[1:] {
		if len(l) != len(lines[0]) {
			t.Fatalf("ragged table:\n%s", buf.Bytes())
		}
	}
}

func TestReport(t *testing.T) {
	r := NewReport("mooncake_small", benchRuns(), "kv_hints")
	out, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "testdata/golden/report.json", append(out, '\n'))

	// The keys machines read, in each policy.
	var generic struct {
		Workload string                    `json:"workload"`
		Policies map[string]map[string]any `json:"policies"`
		Ratios   map[string]float64        `json:"ratios"`
	}
	if err := json.Unmarshal(out, &generic); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"round_robin", "random", "least_loaded", "kv", "kv_hints"} {
		pol, ok := generic.Policies[name]
		if !ok {
			t.Fatalf("no policy %s", name)
		}
		for _, key := range []string{"ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "e2e_p50_ms", "output_tokens_per_s",
			"local_hit_ratio", "peer_restored_ratio", "recomputed_tokens", "hints_issued", "hints_skipped", "errors", "requests"} {
			if _, ok := pol[key]; !ok {
				t.Errorf("policy %s lacks %s", name, key)
			}
		}
	}
	want := map[string]float64{
		"kv_hints_ttft_p90_vs_round_robin":  168.0 / 420,
		"kv_hints_ttft_p90_vs_random":       168.0 / 400.75,
		"kv_hints_ttft_p90_vs_least_loaded": 168.0 / 300,
		"kv_hints_ttft_p90_vs_kv":           168.0 / 240,
	}
	if len(generic.Ratios) != len(want) {
		t.Fatalf("ratios %v, want %v", generic.Ratios, want)
	}
	for k, v := range want {
		if generic.Ratios[k] != v {
			t.Errorf("%s = %v, want %v", k, generic.Ratios[k], v)
		}
	}
}

func TestRatiosSkipMissing(t *testing.T) {
	runs := benchRuns()
	runs[1].TTFTP90 = 0 // random: every request failed
	if r := NewReport("w", runs, "kv_hints"); len(r.Ratios) != 3 {
		t.Fatalf("ratios %v: want 3, none against a run without TTFT", r.Ratios)
	}
	if r := NewReport("w", runs, "absent"); len(r.Ratios) != 0 {
		t.Fatalf("ratios %v without the reference run", r.Ratios)
	}
	runs[4].TTFTP90 = 0
	if r := NewReport("w", runs, "kv_hints"); len(r.Ratios) != 0 {
		t.Fatalf("ratios %v for a reference without TTFT", r.Ratios)
	}
}
