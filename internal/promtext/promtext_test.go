package promtext

import (
	"strings"
	"testing"
)

// exposition is client_golang's text format with what engines add: colons
// in names, a label value holding an escaped quote and a brace, a name
// that starts like another's, untyped series and a histogram.
const exposition = `# HELP kvrouter_hints_total Hint decisions.
# TYPE kvrouter_hints_total counter
kvrouter_hints_total{reason="hinted",result="issued"} 42
kvrouter_hints_total{reason="no_candidate",result="skipped"} 7
kvrouter_hints_total{reason="not_beyond_target",result="skipped"} 3
# HELP kvrouter_hints_total_other a metric whose name starts like another's
kvrouter_hints_total_other{result="issued"} 1000
weird_metric{path="a\"}b",result="issued"} 5
vllm:num_requests_running{engine="0",model_name="demo"} 3.0
# TYPE pull_seconds histogram
pull_seconds_bucket{le="0.001"} 1
pull_seconds_bucket{le="+Inf"} 3
pull_seconds_sum 0.0421
pull_seconds_count 3
`

func TestParse(t *testing.T) {
	e, err := Parse([]byte(exposition))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		match map[string]string
		want  float64
	}{
		{"kvrouter_hints_total", nil, 52},
		{"kvrouter_hints_total", map[string]string{"result": "skipped"}, 10},
		{"kvrouter_hints_total", map[string]string{"result": "skipped", "reason": "no_candidate"}, 7},
		{"kvrouter_hints_total", map[string]string{"result": "other"}, 0},
		{"kvrouter_hints_total_other", nil, 1000},
		{"weird_metric", map[string]string{"path": `a"}b`}, 5},
		{"vllm:num_requests_running", map[string]string{"engine": "0"}, 3},
		{"absent", nil, 0},
	} {
		if got := e.Sum(tc.name, tc.match); got != tc.want {
			t.Errorf("Sum(%s, %v) = %v, want %v", tc.name, tc.match, got, tc.want)
		}
	}
	if n, s := e.Histogram("pull_seconds"); n != 3 || s != 0.0421 {
		t.Errorf("Histogram = %v observations summing %v, want 3 and 0.0421", n, s)
	}
}

func TestParseRefusesGarbage(t *testing.T) {
	for _, text := range []string{
		"kvrouter_hints_total{result=\"issued\"\n",
		"kvrouter_hints_total{result=issued} 1\n",
		"kvrouter_hints_total{result=\"issued\"} one\n",
		"kvrouter_hints_total\n",
		"# TYPE a counter\n# TYPE a gauge\na 1\n",
	} {
		if _, err := Parse([]byte(text)); err == nil {
			t.Errorf("%q parsed without error", text)
		}
	}
}

// TestParseLenient: a refused line costs that line, not the exposition;
// what Parse accepts, ParseLenient reads the same.
func TestParseLenient(t *testing.T) {
	good := strings.Split(strings.TrimSuffix(exposition, "\n"), "\n")
	for _, bad := range []string{
		"not a metric line at all",
		`vllm:num_requests_running{engine="0" 3`,
		`kvrouter_hints_total{result="issued"} one`,
		"# TYPE kvrouter_hints_total gauge",
	} {
		for at := range len(good) + 1 {
			lines := append(append(append([]string{}, good[:at]...), bad), good[at:]...)
			e := ParseLenient([]byte(strings.Join(lines, "\n") + "\n"))
			if got := e.Sum("kvrouter_hints_total", map[string]string{"result": "skipped"}); got != 10 {
				t.Errorf("%q at line %d: skipped hints %v, want 10", bad, at+1, got)
			}
			if got := e.Sum("weird_metric", nil); got != 5 {
				t.Errorf("%q at line %d: weird_metric %v, want 5", bad, at+1, got)
			}
			if got := e.Sum("vllm:num_requests_running", nil); got != 3 {
				t.Errorf("%q at line %d: running %v, want 3", bad, at+1, got)
			}
		}
	}
}
