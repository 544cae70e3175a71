package loadgen

import (
	"reflect"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ten := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(i + 1)
	}
	tests := []struct {
		sorted []float64
		p      float64
		want   float64
	}{
		{nil, 50, 0},
		{[]float64{7}, 1, 7},
		{[]float64{7}, 100, 7},
		{ten, 50, 5},   // ⌈5⌉ = 5th
		{ten, 90, 9},   // ⌈9⌉ = 9th
		{ten, 99, 10},  // ⌈9.9⌉ = 10th
		{ten, 10, 1},   // ⌈1⌉ = 1st
		{ten, 11, 2},   // ⌈1.1⌉ = 2nd
		{ten, 0.1, 1},  // ⌈0.01⌉ = 1st
		{ten, 100, 10}, // the maximum
		{[]float64{1, 2, 3}, 50, 2},
		{[]float64{1, 2, 3, 4}, 50, 2}, // nearest rank does not interpolate
		{[]float64{1, 2, 3, 4}, 51, 3},
		{hundred, 99, 99},
		{hundred, 99.5, 100},
		{hundred, 90, 90},
		{hundred, 29, 29},
		{hundred, 7, 7},                         // not the 8th that 0.07·100 = 7.000000000000001 would give
		{hundred, 57, 57},                       // 0.57·100 = 56.99999999999999
		{[]float64{15, 20, 35, 40, 50}, 30, 20}, // the worked example of the nearest-rank method
		{[]float64{15, 20, 35, 40, 50}, 40, 20},
		{[]float64{15, 20, 35, 40, 50}, 50, 35},
		{[]float64{15, 20, 35, 40, 50}, 100, 50},
	}
	for _, tt := range tests {
		if got := Percentile(tt.sorted, tt.p); got != tt.want {
			t.Errorf("Percentile(%v, %v) = %v, want %v", tt.sorted, tt.p, got, tt.want)
		}
	}
}

func TestSummary(t *testing.T) {
	ok := func(ttft, e2e int, u Usage) Record {
		return Record{TTFT: time.Duration(ttft) * time.Millisecond, E2E: time.Duration(e2e) * time.Millisecond, Status: 200, Usage: u}
	}
	failed := Record{TTFT: time.Hour, E2E: time.Hour, Status: 500, Err: ErrStatus, Usage: Usage{PromptTokens: 1 << 20}}
	tests := []struct {
		name string
		res  Results
		want Summary
	}{{
		name: "empty",
		want: Summary{},
	}, {
		name: "extension figures, errors excluded from latency and tokens",
		res: Results{Wall: 2 * time.Second, Records: []Record{
			ok(40, 400, Usage{PromptTokens: 1000, CompletionTokens: 100, CachedTokens: 900, LocalCachedTokens: 500, PeerRestoredTokens: 400, Extension: true}),
			failed,
			ok(10, 100, Usage{PromptTokens: 1000, CompletionTokens: 50, LocalCachedTokens: 0, PeerRestoredTokens: 0, Extension: true}),
			ok(30, 300, Usage{PromptTokens: 2000, CompletionTokens: 50, LocalCachedTokens: 1500, PeerRestoredTokens: 0, Extension: true}),
			ok(20, 200, Usage{PromptTokens: 0, CompletionTokens: 200, Extension: true}),
		}},
		want: Summary{
			Requests: 5, Errors: 1,
			TTFTP50: 20, TTFTP90: 40, TTFTP99: 40, E2EP50: 200, E2EP90: 400,
			OutputTokensPerS: 200, // 400 tokens over 2 s
			PromptTokens:     4000, OutputTokens: 400, LocalCachedTokens: 2000, PeerRestoredTokens: 400,
			RecomputedTokens: 100 + 1000 + 500,
			LocalHitRatio:    0.5, PeerRestoredRatio: 0.1,
			TTFT: []float64{10, 20, 30, 40},
		},
	}, {
		name: "without the extension cached_tokens are local hits and nothing is restored",
		res: Results{Wall: time.Second, Records: []Record{
			ok(5, 10, Usage{PromptTokens: 100, CompletionTokens: 10, CachedTokens: 25}),
		}},
		want: Summary{
			Requests: 1, TTFTP50: 5, TTFTP90: 5, TTFTP99: 5, E2EP50: 10, E2EP90: 10, OutputTokensPerS: 10,
			PromptTokens: 100, OutputTokens: 10, LocalCachedTokens: 25, RecomputedTokens: 75, LocalHitRatio: 0.25,
			TTFT: []float64{5},
		},
	}, {
		name: "an engine over-reporting hits never makes recomputed negative",
		res: Results{Records: []Record{
			ok(1, 1, Usage{PromptTokens: 10, LocalCachedTokens: 8, PeerRestoredTokens: 8, Extension: true}),
		}},
		want: Summary{
			Requests: 1, TTFTP50: 1, TTFTP90: 1, TTFTP99: 1, E2EP50: 1, E2EP90: 1,
			PromptTokens: 10, LocalCachedTokens: 8, PeerRestoredTokens: 8, LocalHitRatio: 0.8, PeerRestoredRatio: 0.8,
			TTFT: []float64{1},
		},
	}, {
		name: "all failed",
		res:  Results{Wall: time.Second, Records: []Record{failed, failed}},
		want: Summary{Requests: 2, Errors: 2},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.res.Summary(); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestSummaryLeavesWarmupOut(t *testing.T) {
	res := Results{Wall: time.Second, Records: []Record{
		{TTFT: time.Hour, E2E: time.Hour, Status: 200, Warmup: true, Usage: Usage{PromptTokens: 100, CompletionTokens: 1}},
		{TTFT: time.Millisecond, E2E: time.Millisecond, Status: 200, Usage: Usage{PromptTokens: 10, CompletionTokens: 1}},
	}}
	s := res.Summary()
	if s.Requests != 1 || s.Warmup != 1 || s.TTFTP99 != 1 || s.PromptTokens != 10 || s.OutputTokens != 1 {
		t.Fatalf("%+v", s)
	}
}
