// This file holds the engine's Prometheus metrics, the ranks' read at scrape time.

package mocker

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are an engine's Prometheus metrics, on a registry of its own so
// that several engines can share a process (tests).
type metrics struct {
	reg         *prometheus.Registry
	hints       *prometheus.CounterVec
	pullSeconds prometheus.Histogram
}

func newMetrics(e *Engine) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		hints: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricHintOutcomes,
			Help: "Requests by what their KV hint achieved: none, invalid, local (nothing beyond the local prefix), restored, partial, failed.",
		}, []string{labelOutcome}),
		pullSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    metricPeerPull,
			Help:    "Wall time of peer pulls of hinted blocks (real TCP transfers).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
	}
	for _, o := range []string{outcomeNone, outcomeInvalid, outcomeLocal, outcomeRestored, outcomePartial, outcomeFailed} {
		m.hints.WithLabelValues(o)
	}
	m.reg.MustRegister(m.hints, m.pullSeconds, &rankCollector{e: e})
	return m
}

func (m *metrics) hint(outcome string) { m.hints.WithLabelValues(outcome).Inc() }

// rankCollector reads every rank's state at scrape time, so the hot path
// updates nothing for it.
type rankCollector struct{ e *Engine }

var (
	descRunning     = prometheus.NewDesc(metricRunning, "Requests in the running batch.", []string{labelDPRank}, nil)
	descWaiting     = prometheus.NewDesc(metricWaiting, "Requests waiting for admission.", []string{labelDPRank}, nil)
	descGPUUsed     = prometheus.NewDesc(metricGPUUsed, "GPU KV blocks referenced by requests.", []string{labelDPRank}, nil)
	descGPUCached   = prometheus.NewDesc(metricGPUCached, "GPU KV blocks in the prefix cache.", []string{labelDPRank}, nil)
	descGPUTotal    = prometheus.NewDesc(metricGPUTotal, "GPU KV blocks of the rank (--gpu-blocks).", []string{labelDPRank}, nil)
	descRunnerUsed  = prometheus.NewDesc(metricRunnerUsed, "Blocks held by a runner shard.", []string{labelDPRank, labelTPRank}, nil)
	descRunnerTotal = prometheus.NewDesc(metricRunnerTotal, "Block slots of a runner shard (--runner-blocks).", []string{labelDPRank, labelTPRank}, nil)
	descRunnerExp   = prometheus.NewDesc(metricRunnerExpired, "Peer FETCHes a runner shard's server cut off (a peer that stalled mid-answer past the block write timeout, or read too slowly for the fetch deadline): the connection was reset and the block being sent unpinned.", []string{labelDPRank, labelTPRank}, nil)
	descRunnerConns = prometheus.NewDesc(metricRunnerConns, "Peer connections a runner shard's server has open.", []string{labelDPRank, labelTPRank}, nil)
	descRunnerRef   = prometheus.NewDesc(metricRunnerRefused, "Peer connections a runner shard's server refused, by reason: full (every slot taken) or client_limit (the client address had its most open). Hinted pulls from a refused peer fail.", []string{labelDPRank, labelTPRank, labelReason}, nil)
	descRunnerHSTO  = prometheus.NewDesc(metricRunnerHSTO, "Peer connections a runner shard's server closed for not finishing the handshake in time (connected and idled).", []string{labelDPRank, labelTPRank}, nil)
	descPrefill     = prometheus.NewDesc(metricPrefillTokens, "Prompt tokens computed by prefill.", []string{labelDPRank}, nil)
	descCached      = prometheus.NewDesc(metricCachedTokens, "Prompt tokens not computed, by where their KV came from: gpu prefix cache, local runner, or peer.", []string{labelDPRank, labelSource}, nil)
	descPeer        = prometheus.NewDesc(metricPeerTokens, "Prompt tokens restored from blocks pulled from a peer runner.", []string{labelDPRank}, nil)
)

func (c *rankCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRunning, descWaiting, descGPUUsed, descGPUCached, descGPUTotal, descRunnerUsed, descRunnerTotal, descRunnerExp, descRunnerConns, descRunnerRef, descRunnerHSTO, descPrefill, descCached, descPeer} {
		ch <- d
	}
}

func (c *rankCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v int, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, r := range c.e.ranks {
		dp := strconv.Itoa(r.id)
		st := r.stats()
		gauge(descRunning, st.Running, dp)
		gauge(descWaiting, st.Waiting, dp)
		gauge(descGPUUsed, st.GPUUsed, dp)
		gauge(descGPUCached, st.GPUCached, dp)
		gauge(descGPUTotal, st.GPUTotal, dp)
		counter(descPrefill, st.PrefillTokens, dp)
		counter(descCached, st.GPUTokens, dp, sourceGPU)
		counter(descCached, st.RunnerTokens, dp, sourceRunner)
		counter(descCached, st.PeerTok, dp, sourcePeer)
		counter(descPeer, st.PeerTok, dp)
		for t, run := range r.tier.runners {
			rs := run.Stats()
			gauge(descRunnerUsed, rs.Used, dp, strconv.Itoa(t))
			gauge(descRunnerTotal, rs.Slots, dp, strconv.Itoa(t))
			counter(descRunnerExp, rs.ServeExpired, dp, strconv.Itoa(t))
			if t < len(r.tier.servers) {
				ss := r.tier.servers[t].Stats()
				gauge(descRunnerConns, ss.Conns, dp, strconv.Itoa(t))
				counter(descRunnerRef, ss.RefusedFull, dp, strconv.Itoa(t), reasonFull)
				counter(descRunnerRef, ss.RefusedClient, dp, strconv.Itoa(t), reasonClientLimit)
				counter(descRunnerHSTO, ss.HandshakeTimeouts, dp, strconv.Itoa(t))
			}
		}
	}
}
