// This file holds the hint learner's estimates as /debug/workers shows them and as metrics.

package admin

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"kvrouter/internal/hints"
	"kvrouter/internal/index"
)

// pullJSON is a pull estimate: a fixed setup plus a time per token.
type pullJSON struct {
	SetupMS            float64  `json:"setup_ms"`
	USPerToken         float64  `json:"us_per_token"`
	BandwidthBytesPerS *float64 `json:"bandwidth_bytes_per_s"` // null: free
	BytesPerToken      float64  `json:"bytes_per_token"`
	ShortShare         float64  `json:"short_share"`
	// Samples is the estimate's own decayed weight: 0 takes the fleet's
	// (for a pair) or the prior (for the fleet).
	Samples float64 `json:"samples"`
}

type pairJSON struct {
	Source sourceJSON `json:"source"`
	Target sourceJSON `json:"target"`
	pullJSON
	Pulls      int       `json:"pulls"`
	LastPullMS float64   `json:"last_pull_ms"`
	LastAt     time.Time `json:"last_at"`
}

type recomputeJSON struct {
	TokensPerS float64 `json:"tokens_per_s"`
	USPerToken float64 `json:"us_per_token"`
	Samples    float64 `json:"samples"`
}

type targetEstimateJSON struct {
	Target sourceJSON `json:"target"`
	recomputeJSON
	Prefills int       `json:"prefills"`
	LastAt   time.Time `json:"last_at"`
}

type priorJSON struct {
	SetupMS            float64 `json:"setup_ms"`
	BandwidthBytesPerS float64 `json:"bandwidth_bytes_per_s"`
	BytesPerToken      float64 `json:"bytes_per_token"`
	PrefillTokensPerS  float64 `json:"prefill_tokens_per_s"`
}

// estimatesJSON is /debug/workers' "hint_estimates".
type estimatesJSON struct {
	Prior          priorJSON            `json:"prior"`
	FleetPull      pullJSON             `json:"fleet_pull"`
	FleetRecompute recomputeJSON        `json:"fleet_recompute"`
	Pairs          []pairJSON           `json:"pairs"`
	Targets        []targetEstimateJSON `json:"targets"`
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

func pullOf(e hints.PullEstimate) pullJSON {
	out := pullJSON{SetupMS: msOf(e.Setup), USPerToken: e.SecondsPerToken * 1e6, BytesPerToken: e.BytesPerToken,
		ShortShare: e.ShortShare, Samples: e.Samples}
	if bw := e.BandwidthBytesPerS(); !math.IsInf(bw, 0) {
		out.BandwidthBytesPerS = &bw
	}
	return out
}

func recomputeOf(e hints.RecomputeEstimate) recomputeJSON {
	return recomputeJSON{TokensPerS: e.TokensPerS(), USPerToken: e.SecondsPerToken * 1e6, Samples: e.Samples}
}

func sourceOf(s index.Source) sourceJSON {
	if s.Owner != "" {
		return sourceJSON{Owner: s.Owner}
	}
	rank := s.Rank
	return sourceJSON{WorkerID: s.Worker, DPRank: &rank}
}

func estimatesOf(l *hints.Learner) *estimatesJSON {
	v := l.View()
	p := v.Prior
	out := &estimatesJSON{
		Prior: priorJSON{SetupMS: msOf(p.Setup), BandwidthBytesPerS: p.BandwidthBytesPerS, BytesPerToken: p.BytesPerToken,
			PrefillTokensPerS: p.PrefillTokensPerS},
		FleetPull: pullOf(v.Fleet), FleetRecompute: recomputeOf(v.Recompute),
		Pairs: []pairJSON{}, Targets: []targetEstimateJSON{},
	}
	for _, pv := range v.Pairs {
		out.Pairs = append(out.Pairs, pairJSON{Source: sourceOf(pv.Source), Target: sourceOf(pv.Target), pullJSON: pullOf(pv.PullEstimate),
			Pulls: pv.Pulls, LastPullMS: pv.LastMS, LastAt: pv.Last})
	}
	for _, tv := range v.Targets {
		out.Targets = append(out.Targets, targetEstimateJSON{Target: sourceOf(tv.Target), recomputeJSON: recomputeOf(tv.RecomputeEstimate),
			Prefills: tv.Prefills, LastAt: tv.Last})
	}
	return out
}

// RegisterLearner adds to reg the hint learner's estimates, read at scrape
// time: per (source, target) pair and per target, and the fleet's.
func RegisterLearner(reg prometheus.Registerer, l *hints.Learner) {
	reg.MustRegister(&learnCollector{l: l})
}

type learnCollector struct{ l *hints.Learner }

var _ prometheus.Collector = (*learnCollector)(nil)

var (
	pairLabels      = []string{"source", "target"}
	descPullSetup   = prometheus.NewDesc("kvrouter_hint_pull_setup_seconds", "Learned fixed cost of a peer pull, per (source, target); source=\"fleet\" is the pooled estimate a pair without samples takes.", pairLabels, nil)
	descPullToken   = prometheus.NewDesc("kvrouter_hint_pull_seconds_per_token", "Learned transfer time of one token's KV, per (source, target).", pairLabels, nil)
	descPullShort   = prometheus.NewDesc("kvrouter_hint_pull_short_ratio", "Decayed share of a pair's pulls that brought fewer blocks than wanted.", pairLabels, nil)
	descPullSamples = prometheus.NewDesc("kvrouter_hint_pull_samples", "Decayed weight of the pulls behind a pair's estimate.", pairLabels, nil)
	descRecompute   = prometheus.NewDesc("kvrouter_hint_recompute_tokens_per_second", "Learned recompute (prefill) rate per target; target=\"fleet\" is the pooled estimate.", []string{"target"}, nil)
	descRecSamples  = prometheus.NewDesc("kvrouter_hint_recompute_samples", "Decayed weight of the prefill timings behind a target's estimate.", []string{"target"}, nil)
)

func (c *learnCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPullSetup, descPullToken, descPullShort, descPullSamples, descRecompute, descRecSamples} {
		ch <- d
	}
}

func (c *learnCollector) Collect(ch chan<- prometheus.Metric) {
	v := c.l.View()
	pull := func(e hints.PullEstimate, src, dst string) {
		ch <- prometheus.MustNewConstMetric(descPullSetup, prometheus.GaugeValue, e.Setup.Seconds(), src, dst)
		ch <- prometheus.MustNewConstMetric(descPullToken, prometheus.GaugeValue, e.SecondsPerToken, src, dst)
		ch <- prometheus.MustNewConstMetric(descPullShort, prometheus.GaugeValue, e.ShortShare, src, dst)
		ch <- prometheus.MustNewConstMetric(descPullSamples, prometheus.GaugeValue, e.Samples, src, dst)
	}
	pull(v.Fleet, "fleet", "fleet")
	for _, p := range v.Pairs {
		pull(p.PullEstimate, p.Source.String(), p.Target.String())
	}
	rec := func(e hints.RecomputeEstimate, dst string) {
		ch <- prometheus.MustNewConstMetric(descRecompute, prometheus.GaugeValue, e.TokensPerS(), dst)
		ch <- prometheus.MustNewConstMetric(descRecSamples, prometheus.GaugeValue, e.Samples, dst)
	}
	rec(v.Recompute, "fleet")
	for _, t := range v.Targets {
		rec(t.RecomputeEstimate, t.Target.String())
	}
}
