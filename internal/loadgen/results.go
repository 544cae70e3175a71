// This file holds what a run records per request and the summary a benchmark reports.

package loadgen

import (
	"math"
	"slices"
	"time"
)

// Record is what happened to one request.
type Record struct {
	ID      string
	Session string
	Turn    int
	// Due is the arrival offset the workload asked for; Sent is when the
	// request went, from the start of the run. Sent > Due when the turn
	// before it or the concurrency cap held it back.
	Due  time.Duration
	Sent time.Duration
	// TTFT runs from sending to the first chunk carrying generated text;
	// E2E from sending to the end of the stream (or the failure).
	TTFT time.Duration
	E2E  time.Duration
	// Status is the HTTP status, 0 when no response came.
	Status int
	// Err is nil for a request that completed with a usage chunk.
	Err   error
	Usage Usage
	// Warmup is the request's workload.Request.Warmup: Summary leaves it
	// out.
	Warmup bool
}

// Results is the outcome of a run.
type Results struct {
	// Records has one entry per request sent, in workload order.
	Records []Record
	// Wall runs from the start of the run to the end of its last request.
	Wall time.Duration
}

// Summary reduces a run to the figures a benchmark reports. Latencies are
// in milliseconds and cover the requests that succeeded; failed requests
// count in Requests and Errors only.
type Summary struct {
	Requests int `json:"requests"`
	Errors   int `json:"errors"`
	// Warmup counts the warm-up requests sent but not measured.
	Warmup int `json:"warmup_requests,omitempty"`

	TTFTP50 float64 `json:"ttft_p50_ms"`
	TTFTP90 float64 `json:"ttft_p90_ms"`
	TTFTP99 float64 `json:"ttft_p99_ms"`
	E2EP50  float64 `json:"e2e_p50_ms"`
	E2EP90  float64 `json:"e2e_p90_ms"`

	// OutputTokensPerS is all output tokens over the run's wall time.
	OutputTokensPerS float64 `json:"output_tokens_per_s"`

	PromptTokens       int64 `json:"prompt_tokens"`
	OutputTokens       int64 `json:"output_tokens"`
	LocalCachedTokens  int64 `json:"local_cached_tokens"`
	PeerRestoredTokens int64 `json:"peer_restored_tokens"`
	// RecomputedTokens is prompt tokens neither found locally nor restored
	// from a peer, i.e. prefilled from scratch.
	RecomputedTokens int64 `json:"recomputed_tokens"`
	// LocalHitRatio and PeerRestoredRatio are shares of PromptTokens.
	LocalHitRatio     float64 `json:"local_hit_ratio"`
	PeerRestoredRatio float64 `json:"peer_restored_ratio"`

	// TTFT holds every successful request's TTFT in ms, ascending, for
	// plotting.
	TTFT []float64 `json:"-"`
}

// Summary computes the run's figures. Without the kvrouter usage
// extension a request's local hits are its cached_tokens and its peer
// restores zero; with it, cached_tokens is not used, since an engine may
// count restored tokens as cached and recomputed tokens must not go below
// what was really prefilled.
func (r Results) Summary() Summary {
	var s Summary
	var e2e []float64
	for _, rec := range r.Records {
		if rec.Warmup {
			s.Warmup++
			continue
		}
		s.Requests++
		if rec.Err != nil {
			s.Errors++
			continue
		}
		s.TTFT = append(s.TTFT, ms(rec.TTFT))
		e2e = append(e2e, ms(rec.E2E))
		u := rec.Usage
		local, peer := u.CachedTokens, 0
		if u.Extension {
			local, peer = u.LocalCachedTokens, u.PeerRestoredTokens
		}
		s.PromptTokens += int64(u.PromptTokens)
		s.OutputTokens += int64(u.CompletionTokens)
		s.LocalCachedTokens += int64(local)
		s.PeerRestoredTokens += int64(peer)
		s.RecomputedTokens += int64(max(0, u.PromptTokens-local-peer))
	}
	slices.Sort(s.TTFT)
	slices.Sort(e2e)
	s.TTFTP50, s.TTFTP90, s.TTFTP99 = Percentile(s.TTFT, 50), Percentile(s.TTFT, 90), Percentile(s.TTFT, 99)
	s.E2EP50, s.E2EP90 = Percentile(e2e, 50), Percentile(e2e, 90)
	if r.Wall > 0 {
		s.OutputTokensPerS = float64(s.OutputTokens) / r.Wall.Seconds()
	}
	if s.PromptTokens > 0 {
		s.LocalHitRatio = float64(s.LocalCachedTokens) / float64(s.PromptTokens)
		s.PeerRestoredRatio = float64(s.PeerRestoredTokens) / float64(s.PromptTokens)
	}
	return s
}

// Percentile returns the p-th percentile (0 < p ≤ 100) of ascending
// samples by the nearest-rank method: the smallest sample with at least p
// percent of the samples at or below it, i.e. sorted[⌈p·n/100⌉-1]. It is
// always one of the samples, never an interpolation. No samples give 0.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	// p·n first, then the division: 7·100/100 is exactly 7, where
	// 0.07·100 is 7.000000000000001 and would round up to the 8th sample.
	rank := int(math.Ceil(p * float64(n) / 100))
	return sorted[min(max(rank, 1), n)-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
