// This file holds the comparison of runs: the JSON report, the table and the TTFT ratios.

package loadgen

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// NamedSummary is one run's figures under a name, usually the routing
// policy it ran with.
type NamedSummary struct {
	Name string `json:"-"`
	Summary
	// Hints are counted by the router (issued, and skipped because a
	// recompute was cheaper or the router was unsure); clients cannot see
	// them, so the caller fills them in.
	HintsIssued  int64 `json:"hints_issued"`
	HintsSkipped int64 `json:"hints_skipped"`
}

// Report is the machine-readable result of a comparison of runs:
//
//	{"workload": "...", "policies": {"kv": {"ttft_p50_ms": ..., ...}, ...},
//	 "ratios": {"kv_hints_ttft_p90_vs_kv": 0.8, ...}}
//
// A ratio is the reference run's TTFT p90 over the other run's: below 1
// the reference is faster.
type Report struct {
	Workload string                  `json:"workload"`
	Policies map[string]NamedSummary `json:"policies"`
	Ratios   map[string]float64      `json:"ratios"`
}

// NewReport gathers runs into a Report with ratios of ref (e.g.
// "kv_hints") against each other run. A ratio is left out when either run
// has no TTFT p90 (no successful request).
func NewReport(workload string, runs []NamedSummary, ref string) Report {
	r := Report{Workload: workload, Policies: map[string]NamedSummary{}, Ratios: map[string]float64{}}
	for _, run := range runs {
		r.Policies[run.Name] = run
	}
	for _, x := range ratios(runs, ref) {
		r.Ratios[ref+"_ttft_p90_vs_"+x.other] = x.value
	}
	return r
}

type ratio struct {
	other string
	value float64
}

// ratios returns ref's TTFT p90 over each other run's, in run order.
func ratios(runs []NamedSummary, ref string) []ratio {
	var base *NamedSummary
	for i := range runs {
		if runs[i].Name == ref {
			base = &runs[i]
		}
	}
	if base == nil || base.TTFTP90 <= 0 {
		return nil
	}
	var out []ratio
	for _, run := range runs {
		if run.Name != ref && run.TTFTP90 > 0 {
			out = append(out, ratio{run.Name, base.TTFTP90 / run.TTFTP90})
		}
	}
	return out
}

// Table writes runs as aligned columns, one row per run in the given
// order: names left, figures right.
func Table(w io.Writer, runs []NamedSummary) error {
	rows := [][]string{{"policy", "requests", "errors", "ttft p50 ms", "p90 ms", "p99 ms", "e2e p50 ms",
		"out tok/s", "local hit", "peer restored", "recomputed", "hints", "skipped"}}
	for _, r := range runs {
		rows = append(rows, []string{
			r.Name,
			strconv.Itoa(r.Requests),
			strconv.Itoa(r.Errors),
			fixed(r.TTFTP50, 1), fixed(r.TTFTP90, 1), fixed(r.TTFTP99, 1), fixed(r.E2EP50, 1),
			fixed(r.OutputTokensPerS, 1),
			percent(r.LocalHitRatio), percent(r.PeerRestoredRatio),
			strconv.FormatInt(r.RecomputedTokens, 10),
			strconv.FormatInt(r.HintsIssued, 10), strconv.FormatInt(r.HintsSkipped, 10),
		})
	}
	return writeColumns(w, rows)
}

// WriteRatios writes ref's TTFT p90 against each other run's, one line
// each, e.g. "kv_hints ttft p90 vs round_robin: 0.42x".
func WriteRatios(w io.Writer, runs []NamedSummary, ref string) error {
	var b strings.Builder
	for _, x := range ratios(runs, ref) {
		fmt.Fprintf(&b, "%s ttft p90 vs %s: %.2fx\n", ref, x.other, x.value)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Columns writes rows (the first a header) as aligned columns: the first
// left, the others right.
func Columns(w io.Writer, rows [][]string) error { return writeColumns(w, rows) }

func writeColumns(w io.Writer, rows [][]string) error {
	widths := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, cell := range row {
			widths[i] = max(widths[i], utf8.RuneCountInString(cell))
		}
	}
	var b strings.Builder
	for _, row := range rows {
		for i, cell := range row {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cell))
			switch {
			case i == 0:
				b.WriteString(cell + pad)
			default:
				b.WriteString("  " + pad + cell)
			}
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func fixed(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }

func percent(v float64) string { return strconv.FormatFloat(100*v, 'f', 1, 64) + "%" }
