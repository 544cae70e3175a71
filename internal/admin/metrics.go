package gateway

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"kvrouter/internal/kvevents"
	"kvrouter/internal/router"
	"kvrouter/internal/upstream"
)

// Request outcomes, the label of kvrouter_requests_total.
const (
	outcomeOK            = "ok"
	outcomeUpstreamError = "upstream_error"
	outcomeNoWorker      = "no_worker"
	outcomeBadRequest    = "bad_request"
	outcomeCanceled      = "canceled"
)

// Metrics are the router's Prometheus metrics, on a registry of their own
// so that several replicas can live in one process (tests).
type Metrics struct {
	reg *prometheus.Registry

	requests       *prometheus.CounterVec
	retries        prometheus.Counter
	decision       prometheus.Histogram
	tokenize       prometheus.Histogram
	tokenizeErrors *prometheus.CounterVec
	overlap        prometheus.Histogram
	hints          *prometheus.CounterVec
	cachedTokens   *prometheus.CounterVec
	peerRestored   *prometheus.CounterVec

	eventLag      prometheus.Histogram
	eventGaps     *prometheus.CounterVec
	eventDropped  *prometheus.CounterVec
	resyncs       *prometheus.CounterVec
	discoveryLost prometheus.Counter
	peerMessages  *prometheus.CounterVec
}

var latencyBuckets = []float64{5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 0.1, 0.25}

// NewMetrics registers every metric; stats is read at scrape time.
func NewMetrics(stats func() router.Stats) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	f := func(c prometheus.Collector) { m.reg.MustRegister(c) }
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_requests_total",
		Help: "Inference requests by outcome (ok, upstream_error, no_worker, bad_request, canceled)."}, []string{"outcome"})
	m.retries = prometheus.NewCounter(prometheus.CounterOpts{Name: "kvrouter_retries_total",
		Help: "Requests sent to a second worker after the first refused the connection."})
	m.decision = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvrouter_decision_seconds",
		Help: "Routing decision latency (matching, scoring, hint selection), tokenization excluded.", Buckets: latencyBuckets})
	m.tokenize = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvrouter_tokenize_seconds",
		Help: "Tokenization latency (chat template included).", Buckets: latencyBuckets})
	m.tokenizeErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_tokenize_errors_total",
		Help: "Requests routed on load alone because they could not be tokenized, by reason."}, []string{"reason"})
	m.overlap = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvrouter_overlap_ratio",
		Help: "Fraction of a request's blocks the chosen rank holds (any tier).", Buckets: prometheus.LinearBuckets(0, 0.1, 11)})
	m.hints = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_hints_total",
		Help: "Hint decisions of sent requests: result issued or skipped, with the reason."}, []string{"result", "reason"})
	m.cachedTokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_cached_tokens_total",
		Help: "Prompt tokens workers reported as cached (usage.prompt_tokens_details.cached_tokens), by whether a hint was sent."}, []string{"hinted"})
	m.peerRestored = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_peer_restored_tokens_total",
		Help: "Prompt tokens workers reported as pulled from a peer (usage.kvrouter.peer_restored_tokens), by whether a hint was sent."}, []string{"hinted"})
	m.eventLag = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvrouter_event_lag_seconds",
		Help:    "Delay from an engine stamping an event batch to the router applying it (engine clocks permitting).",
		Buckets: prometheus.ExponentialBuckets(1e-4, 4, 10)})
	m.eventGaps = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_event_gaps_total",
		Help: "Engine event stream sequence gaps, restarts and unrecoverable losses, by kind."}, []string{"kind"})
	m.eventDropped = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_events_dropped_total",
		Help: "Engine events or batches not applied, by reason."}, []string{"reason"})
	m.resyncs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_relay_resyncs_total",
		Help: "Snapshots taken from state agents, by reason (start, gap, epoch, rejected, malformed, overflow)."}, []string{"reason"})
	m.discoveryLost = prometheus.NewCounter(prometheus.CounterOpts{Name: "kvrouter_discovery_watch_lost_total",
		Help: "Times the discovery watch was lost (no hints from agent-registered sources until it is back)."})
	m.peerMessages = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_peer_load_messages_total",
		Help: "Load announcements exchanged with router replicas, by direction."}, []string{"direction"})
	for _, c := range []prometheus.Collector{m.requests, m.retries, m.decision, m.tokenize, m.tokenizeErrors, m.overlap,
		m.hints, m.cachedTokens, m.peerRestored, m.eventLag, m.eventGaps, m.eventDropped, m.resyncs,
		m.discoveryLost, m.peerMessages} {
		f(c)
	}
	for _, o := range []string{outcomeOK, outcomeUpstreamError, outcomeNoWorker, outcomeBadRequest, outcomeCanceled} {
		m.requests.WithLabelValues(o)
	}
	f(&stateCollector{stats: stats})
	f(collectors.NewGoCollector())
	f(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// countResends exports the upstream client's resends.
func (m *Metrics) countResends(c *upstream.Client) {
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvrouter_upstream_resends_total",
		Help: "Requests sent again on a new connection because a pooled one to the engine answered nothing " +
			"(the engine closed it while idle); many mean its keep-alive timeout is below 4 s."},
		func() float64 { return float64(c.Resent()) }))
}

// Handler serves /metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// stateCollector reports the router's state as gauges at scrape time.
type stateCollector struct {
	stats func() router.Stats
}

var (
	descBlocks    = prometheus.NewDesc("kvrouter_index_blocks", "Indexed block residencies by tier (as of the last size refresh).", []string{"tier"}, nil)
	descWorkers   = prometheus.NewDesc("kvrouter_workers", "Workers by mode: events (the router sees their KV events) or approximate (it guesses from its own decisions).", []string{"mode"}, nil)
	descSources   = prometheus.NewDesc("kvrouter_sources", "Inventory sources (worker ranks and cache owners) with events.", nil, nil)
	descNotReady  = prometheus.NewDesc("kvrouter_sources_not_ready", "Sources that give no hints now: stream resyncing, gap not healed, or discovery watch lost.", nil, nil)
	descDetached  = prometheus.NewDesc("kvrouter_detached_owners", "Cache owners whose worker left, still hint sources until their TTL.", nil, nil)
	descDiscovery = prometheus.NewDesc("kvrouter_discovery_live", "1 while the discovery watch is in step, 0 while it is lost.", nil, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBlocks, descWorkers, descSources, descNotReady, descDetached, descDiscovery} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	for t, n := range st.BlocksByTier {
		ch <- prometheus.MustNewConstMetric(descBlocks, prometheus.GaugeValue, float64(n), kvevents.Tier(t).String())
	}
	for _, mode := range []router.Mode{router.ModeEvents, router.ModeApproximate} {
		ch <- prometheus.MustNewConstMetric(descWorkers, prometheus.GaugeValue, float64(st.WorkersByMode[mode]), mode.String())
	}
	ch <- prometheus.MustNewConstMetric(descSources, prometheus.GaugeValue, float64(st.Sources))
	ch <- prometheus.MustNewConstMetric(descNotReady, prometheus.GaugeValue, float64(st.NotReady))
	ch <- prometheus.MustNewConstMetric(descDetached, prometheus.GaugeValue, float64(st.DetachedOwners))
	live := 0.0
	if st.DiscoveryLive {
		live = 1
	}
	ch <- prometheus.MustNewConstMetric(descDiscovery, prometheus.GaugeValue, live)
}
