// This file holds what the demo reads of the router and engines over HTTP: completions, hint counts.

package demo

import (
	"context"
	"fmt"

	"kvrouter/internal/cluster"
	"kvrouter/internal/promtext"
)

// Wire names of the router and the engines the demo reads.
const (
	headerWorker  = "x-kvrouter-worker"
	pathComplete  = "/v1/completions"
	pathRoute     = "/debug/route"
	pathWorkers   = "/debug/workers"
	pathMetrics   = "/metrics"
	pathEvict     = "/admin/evict"
	metricHints   = "kvrouter_hints_total"
	labelResult   = "result"
	resultIssued  = "issued"
	resultSkipped = "skipped"
)

// completion is the part of a non-streaming /v1/completions answer the
// scenario checks.
type completion struct {
	Choices []struct {
		Text string `json:"text"`
	} `json:"choices"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		KVRouter     struct {
			PeerRestoredTokens int     `json:"peer_restored_tokens"`
			LocalCachedTokens  int     `json:"local_cached_tokens"`
			SourceEndpoint     *string `json:"source_endpoint"`
		} `json:"kvrouter"`
	} `json:"usage"`
	worker string // the router's x-kvrouter-worker
}

func (c completion) text() string {
	if len(c.Choices) == 0 {
		return ""
	}
	return c.Choices[0].Text
}

// hintCounts reads the router's hints issued and skipped.
func hintCounts(ctx context.Context, routerURL string) (issued, skipped int64, err error) {
	text, err := cluster.Get(ctx, routerURL+pathMetrics)
	if err != nil {
		return 0, 0, err
	}
	m, err := promtext.Parse(text)
	if err != nil {
		return 0, 0, fmt.Errorf("router metrics: %w", err)
	}
	return int64(m.Sum(metricHints, map[string]string{labelResult: resultIssued})),
		int64(m.Sum(metricHints, map[string]string{labelResult: resultSkipped})), nil
}
