package demo

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"

	"kvrouter/internal/cluster"
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

// counterSum adds up every sample of a counter in a Prometheus text
// exposition whose label name has value want ("" matches any).
func counterSum(text []byte, metric, label, want string) (float64, error) {
	var sum float64
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric) {
			continue
		}
		rest := line[len(metric):]
		var labels string
		switch {
		case strings.HasPrefix(rest, "{"):
			end := strings.IndexByte(rest, '}')
			if end < 0 {
				return 0, fmt.Errorf("metrics: bad line %q", line)
			}
			labels, rest = rest[1:end], rest[end+1:]
		case strings.HasPrefix(rest, " "):
		default:
			continue // another metric with this prefix
		}
		if want != "" && !hasLabel(labels, label, want) {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, fmt.Errorf("metrics: no value in %q", line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("metrics: %q: %w", line, err)
		}
		sum += v
	}
	return sum, sc.Err()
}

// hasLabel reports whether labels (the inside of {...}) has name="value".
// Label values of the router's counters hold no commas or quotes.
func hasLabel(labels, name, value string) bool {
	for _, kv := range strings.Split(labels, ",") {
		if strings.TrimSpace(kv) == name+`="`+value+`"` {
			return true
		}
	}
	return false
}

// hintCounts reads the router's hints issued and skipped.
func hintCounts(ctx context.Context, routerURL string) (issued, skipped int64, err error) {
	text, err := cluster.Get(ctx, routerURL+pathMetrics)
	if err != nil {
		return 0, 0, err
	}
	i, err := counterSum(text, metricHints, labelResult, resultIssued)
	if err != nil {
		return 0, 0, err
	}
	s, err := counterSum(text, metricHints, labelResult, resultSkipped)
	if err != nil {
		return 0, 0, err
	}
	return int64(i), int64(s), nil
}
