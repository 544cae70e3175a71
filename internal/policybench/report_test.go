package policybench

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"kvrouter/internal/loadgen"
)

// summary is a run with the figures a comparison reads.
func summary(name string, p90 float64, recomputed int64) loadgen.NamedSummary {
	return loadgen.NamedSummary{Name: name, Summary: loadgen.Summary{Requests: 10, TTFTP50: p90 / 2, TTFTP90: p90,
		RecomputedTokens: recomputed, TTFT: []float64{p90 / 2, p90}}}
}

// TestRepeatsReduce: with repeats the policies' figures are the medians
// over the runs, the ratios compare the medians, each run keeps its own,
// and a comparison whose runs spread wider than the medians differ is
// marked inconclusive, in the JSON and the table alike.
func TestRepeatsReduce(t *testing.T) {
	policies := []Policy{{Name: "kv"}, {Name: "kv_hints"}}
	res := Result{Config: Config{Repeats: 3, Policies: map[string]PolicyRun{}}}
	for i, p := range [][2]float64{{1000, 600}, {1200, 700}, {4500, 650}} {
		run := RepeatRun{Seed: uint64(i + 1), Order: []string{"kv", "kv_hints"},
			Policies: map[string]loadgen.NamedSummary{"kv": summary("kv", p[0], 9000), "kv_hints": summary("kv_hints", p[1], 4000+int64(i))},
			Details:  map[string]PolicyRun{"kv": {Pulls: 0}, "kv_hints": {Pulls: 2, PullMSMean: 100}}}
		run.finish(policies)
		res.Runs = append(res.Runs, run)
	}
	res.finish(WorkloadAgentic, policies)
	kv, kvh := res.Report.Policies["kv"], res.Report.Policies["kv_hints"]
	if kv.TTFTP90 != 1200 || kvh.TTFTP90 != 650 || kvh.RecomputedTokens != 4001 || kv.Requests != 10 {
		t.Fatalf("medians: kv p90 %v, kv_hints p90 %v recomputed %v", kv.TTFTP90, kvh.TTFTP90, kvh.RecomputedTokens)
	}
	if len(kvh.TTFT) != 6 {
		t.Fatalf("pooled TTFTs %v", kvh.TTFT)
	}
	if got := res.Ratios["kv_hints_ttft_p90_vs_kv"]; got != 650.0/1200 {
		t.Fatalf("ratio %v", got)
	}
	if got := res.Runs[2].Ratios["kv_hints_ttft_p90_vs_kv"]; got != 650.0/4500 {
		t.Fatalf("third run's ratio %v", got)
	}
	c := res.Comparisons["kv_hints_ttft_p90_vs_kv"]
	if c.SpreadMS != 3500 || c.DifferenceMS != 550 || c.Conclusive || c.RatioMin != 650.0/4500 || c.RatioMax != 0.6 {
		t.Fatalf("comparison %+v", c)
	}
	if p := res.Config.Policies["kv_hints"]; p.Pulls != 6 || p.PullMSMean != 100 {
		t.Fatalf("details added up to %+v", p)
	}
	var table bytes.Buffer
	if err := writeTable(&table, &res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"p90 ms [min, max]", "1200.0 [1000.0, 4500.0]", "not conclusive: the runs spread over 3500 ms"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Policies map[string]struct {
			TTFTP90 float64 `json:"ttft_p90_ms"`
		} `json:"policies"`
		Runs []struct {
			Seed     uint64 `json:"seed"`
			Policies map[string]struct {
				TTFTP90 float64 `json:"ttft_p90_ms"`
			} `json:"policies"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Policies["kv"].TTFTP90 != 1200 || len(back.Runs) != 3 || back.Runs[2].Seed != 3 || back.Runs[2].Policies["kv"].TTFTP90 != 4500 {
		t.Fatalf("JSON %s", b)
	}
	// A clear gain is conclusive.
	res.Runs[2].Policies["kv"] = summary("kv", 1100, 9000)
	res.Runs[2].finish(policies)
	res.Config.Policies = map[string]PolicyRun{}
	res.Config.Order = nil
	res.finish(WorkloadAgentic, policies)
	if c := res.Comparisons["kv_hints_ttft_p90_vs_kv"]; !c.Conclusive {
		t.Fatalf("comparison %+v", c)
	}
}
