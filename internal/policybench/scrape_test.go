package policybench

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"kvrouter/internal/promtext"
)

// routerMetrics is the shape of the router's exposition (client_golang's
// text format).
const routerMetrics = `# HELP kvrouter_hints_total Hint decisions of sent requests: result issued or skipped, with the reason.
# TYPE kvrouter_hints_total counter
kvrouter_hints_total{reason="hinted",result="issued"} 42
kvrouter_hints_total{reason="no_candidate",result="skipped"} 7
kvrouter_hints_total{reason="not_beyond_target",result="skipped"} 3
kvrouter_hints_total{reason="not_worth_pulling",result="skipped"} 0
# HELP kvrouter_hints_total_other a metric whose name starts like another's
kvrouter_hints_total_other{result="issued"} 1000
kvrouter_requests_total{outcome="ok"} 52
weird_metric{path="a\"}b",result="issued"} 5
`

const engineMetrics = `# HELP kvrouter_mocker_peer_pull_seconds Wall time of peer pulls of hinted blocks (real TCP transfers).
# TYPE kvrouter_mocker_peer_pull_seconds histogram
kvrouter_mocker_peer_pull_seconds_bucket{le="0.0005"} 0
kvrouter_mocker_peer_pull_seconds_bucket{le="0.001"} 1
kvrouter_mocker_peer_pull_seconds_bucket{le="+Inf"} 3
kvrouter_mocker_peer_pull_seconds_sum 0.0421
kvrouter_mocker_peer_pull_seconds_count 3
kvrouter_mocker_requests_running{dp_rank="0"} 2
kvrouter_mocker_requests_running{dp_rank="1"} 1
kvrouter_mocker_requests_waiting{dp_rank="0"} 4
kvrouter_mocker_requests_waiting{dp_rank="1"} 0
kvrouter_mocker_hint_outcomes_total{outcome="restored"} 3
kvrouter_mocker_hint_outcomes_total{outcome="partial"} 1
kvrouter_mocker_hint_outcomes_total{outcome="failed"} 2
kvrouter_mocker_hint_outcomes_total{outcome="local"} 4
`

func TestReadRouterMetrics(t *testing.T) {
	s, err := promtext.Parse([]byte(routerMetrics))
	if err != nil {
		t.Fatal(err)
	}
	h := readHints(s)
	if h.issued != 42 || h.skipped != 10 {
		t.Fatalf("hints issued %d skipped %d, want 42 and 10", h.issued, h.skipped)
	}
	want := map[string]int64{"hinted": 42, "no_candidate": 7, "not_beyond_target": 3}
	if len(h.reasons) != len(want) {
		t.Fatalf("reasons %v, want %v", h.reasons, want)
	}
	for k, v := range want {
		if h.reasons[k] != v {
			t.Fatalf("reasons %v, want %v", h.reasons, want)
		}
	}
}

func TestReadEngineMetrics(t *testing.T) {
	s, err := promtext.Parse([]byte(engineMetrics))
	if err != nil {
		t.Fatal(err)
	}
	p := readPulls(s)
	if p.count != 3 || p.seconds != 0.0421 {
		t.Fatalf("pulls %+v, want 3 in 0.0421 s", p)
	}
	if f := pullFailures(s); f != 3 {
		t.Fatalf("pull failures %v, want 3 (partial and failed)", f)
	}
	if b := busy(s); b != 7 {
		t.Fatalf("busy %v, want 7 (running and waiting on both ranks)", b)
	}
}

func TestWorkersViewIndexed(t *testing.T) {
	// The part of GET /debug/workers the reset wait reads; tiers are
	// named as the router names them.
	const view = `{"discovery_live": true, "workers": [
	  {"id": "A", "ranks": [{"dp_rank": 0, "ready": true, "blocks": {"gpu": 0, "host": 0}}],
	   "owners": [{"id": "kvcr-A", "ready": true, "blocks": {"host": 0}}]},
	  {"id": "B", "ranks": [{"dp_rank": 0, "ready": true, "blocks": {"gpu": 3}}],
	   "owners": [{"id": "kvcr-B", "ready": true, "blocks": {"host": 5}}]},
	  {"id": "C", "ranks": [{"dp_rank": 0, "ready": false, "blocks": {}}],
	   "owners": [{"id": "kvcr-C", "ready": true, "blocks": {}}]},
	  {"id": "E", "ranks": [{"dp_rank": 0, "ready": true, "blocks": {}}], "owners": []}
	], "detached_owners": []}`
	var v workersView
	if err := json.Unmarshal([]byte(view), &v); err != nil {
		t.Fatal(err)
	}
	blocks, missing := v.indexed([]string{"A", "B", "C", "D", "E"})
	if blocks["A"] != 0 || blocks["B"] != 8 || blocks["C"] != 0 {
		t.Fatalf("blocks %v, want A 0, B 8, C 0", blocks)
	}
	// C's rank is not ready, D is not registered, E has no cache owner.
	if !slices.Equal(missing, []string{"C", "D", "E"}) {
		t.Fatalf("missing %v, want [C D E]", missing)
	}
}

func TestPrefixCR(t *testing.T) {
	var b strings.Builder
	w := prefixCR{&b, "kv "}
	if n, err := w.Write([]byte("\r[==>  ] 1/3\r[====>] 2/3\n")); err != nil || n != 25 {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if got, want := b.String(), "\rkv [==>  ] 1/3\rkv [====>] 2/3\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}
