// This file holds the direct ingest's Prometheus metrics.

package direct

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the direct ingest's Prometheus metrics.
type Metrics struct {
	eventLag     prometheus.Histogram
	eventGaps    *prometheus.CounterVec
	eventDropped *prometheus.CounterVec
	streams      *streamStats
}

// NewMetrics registers the direct ingest's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{}
	m.eventLag = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvrouter_event_lag_seconds",
		Help:    "Delay from an engine stamping an event batch to the router applying it (engine clocks permitting).",
		Buckets: prometheus.ExponentialBuckets(1e-4, 4, 10)})
	m.eventGaps = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_event_gaps_total",
		Help: "Engine event stream sequence gaps, restarts and unrecoverable losses, by kind."}, []string{"kind"})
	m.eventDropped = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_events_dropped_total",
		Help: "Engine events or batches not applied, by reason."}, []string{"reason"})
	m.streams = newStreamStats()
	reg.MustRegister(m.eventLag, m.eventGaps, m.eventDropped, m.streams)
	return m
}
