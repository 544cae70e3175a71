// This file holds the front door's Prometheus metrics.

package frontdoor

import (
	"github.com/prometheus/client_golang/prometheus"

	"kvrouter/internal/upstream"
)

// Request outcomes, the label of kvrouter_requests_total.
const (
	outcomeOK            = "ok"
	outcomeUpstreamError = "upstream_error"
	outcomeNoWorker      = "no_worker"
	outcomeBadRequest    = "bad_request"
	outcomeCanceled      = "canceled"
	outcomeOverloaded    = "overloaded"
)

// Upstream failures, the label of kvrouter_upstream_failures_total.
const (
	failureRefused  = "refused"   // the connection was refused
	failureNoAnswer = "no_answer" // it broke before any byte of the answer
	failureBrokeOff = "broke_off" // the answer broke off
)

// Metrics are the front door's Prometheus metrics.
type Metrics struct {
	requests         *prometheus.CounterVec
	retries          prometheus.Counter
	upstreamFailures *prometheus.CounterVec
	streamErrors     prometheus.Counter
	decision         prometheus.Histogram
	tokenize         prometheus.Histogram
	tokenizeErrors   *prometheus.CounterVec
	overlap          prometheus.Histogram
	hints            *prometheus.CounterVec
	cachedTokens     *prometheus.CounterVec
	peerRestored     *prometheus.CounterVec
	pdLegs           *prometheus.CounterVec
	pdSkips          *prometheus.CounterVec
	pdFallbacks      *prometheus.CounterVec
	refused          *prometheus.CounterVec
	oversize         *prometheus.CounterVec
}

var latencyBuckets = []float64{5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 0.1, 0.25}

// NewMetrics registers the front door's metrics on reg (a registry of the
// service's own, so that several replicas can live in one process: tests).
// up, when set, is the client that forwards requests: its resends are
// exported too.
func NewMetrics(reg prometheus.Registerer, up *upstream.Client) *Metrics {
	m := &Metrics{}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_requests_total",
		Help: "Inference requests by outcome (ok, upstream_error, no_worker, bad_request, canceled, overloaded)."}, []string{"outcome"})
	m.retries = prometheus.NewCounter(prometheus.CounterOpts{Name: "kvrouter_retries_total",
		Help: "Requests sent to another worker after one refused the connection or broke it before any answer (--retry-reset)."})
	m.upstreamFailures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_upstream_failures_total",
		Help: "Requests to workers that failed: refused (the connection), no_answer (it broke before any answer), broke_off (the answer broke off)."},
		[]string{"kind"})
	m.streamErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "kvrouter_stream_errors_total",
		Help: "Streams ended with an error event because the worker's stream broke off after part of it reached the client."})
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
	m.pdLegs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_pd_legs_total",
		Help: "Legs of disaggregated requests sent, by leg (prefill, decode) and outcome (ok, failed, rejected: the worker refused the request itself)."},
		[]string{"leg", "outcome"})
	m.pdSkips = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_pd_prefill_skipped_total",
		Help: "Disaggregated requests whose prefill leg was skipped, the decode worker running them alone, by reason (short_rest, mostly_cached)."},
		[]string{"reason"})
	m.pdFallbacks = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_pd_fallbacks_total",
		Help: "Failed prefill legs, by what followed: prefill_retried (on another prefill worker), decode_whole (the decode worker ran the whole request), aggregated (an aggregated worker did), none_left (the client got the failure)."},
		[]string{"kind"})
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_requests_refused_total",
		Help: "Requests refused before routing to bound the router's memory, by reason: body_timeout (not sent within --body-timeout), " +
			"body_busy (bodies in flight at --max-body-memory), body_too_large, prompt_too_long (past the model's max_model_len)."}, []string{"reason"})
	m.oversize = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_upstream_oversize_total",
		Help: "Workers' answers not passed on because they exceeded the router's cap: a whole non-streamed answer, or one event of a stream."},
		[]string{"kind"})
	reg.MustRegister(m.requests, m.retries, m.upstreamFailures, m.streamErrors, m.decision, m.tokenize, m.tokenizeErrors, m.overlap,
		m.hints, m.cachedTokens, m.peerRestored, m.refused, m.oversize, m.pdLegs, m.pdSkips, m.pdFallbacks)
	for _, o := range []string{outcomeOK, outcomeUpstreamError, outcomeNoWorker, outcomeBadRequest, outcomeCanceled, outcomeOverloaded} {
		m.requests.WithLabelValues(o)
	}
	for _, r := range []string{refusedBodyTimeout, refusedBodyBusy, refusedBodyTooBig, refusedPromptLong} {
		m.refused.WithLabelValues(r)
	}
	for _, k := range []string{oversizeAnswer, oversizeEvent} {
		m.oversize.WithLabelValues(k)
	}
	for _, k := range []string{failureRefused, failureNoAnswer, failureBrokeOff} {
		m.upstreamFailures.WithLabelValues(k)
	}
	if up != nil {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvrouter_upstream_resends_total",
			Help: "Requests sent again on a new connection because a pooled one to the engine answered nothing " +
				"(the engine closed it while idle); many mean its keep-alive timeout is below 4 s."},
			func() float64 { return float64(up.Resent()) }))
	}
	return m
}
