// This file holds the discovery follower's Prometheus metrics.

package follow

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the discovery follower's Prometheus metrics.
type Metrics struct {
	resyncs       *prometheus.CounterVec
	discoveryLost prometheus.Counter
	silentAgents  prometheus.Gauge
	silences      prometheus.Counter
	peerRefused   prometheus.Counter
}

// NewMetrics registers the discovery follower's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{}
	m.resyncs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_relay_resyncs_total",
		Help: "Snapshots taken from state agents, by reason (start, gap, epoch, rejected, malformed, overflow)."}, []string{"reason"})
	m.discoveryLost = prometheus.NewCounter(prometheus.CounterOpts{Name: "kvrouter_discovery_watch_lost_total",
		Help: "Times the discovery watch was lost (no hints from agent-registered sources until it is back)."})
	m.silentAgents = prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvrouter_relay_silent_agents",
		Help: "State agents that missed 3 heartbeats: their sources give no hints until they speak again."})
	m.silences = prometheus.NewCounter(prometheus.CounterOpts{Name: "kvrouter_relay_silences_total",
		Help: "Times a state agent fell silent (missed 3 heartbeats)."})
	m.peerRefused = prometheus.NewCounter(prometheus.CounterOpts{Name: "kvrouter_peer_endpoints_refused_total",
		Help: "Registrations refused as hint sources and targets because a runner endpoint they name is neither on the worker's host nor within --peer-allow (counted once per registration change)."})
	reg.MustRegister(m.resyncs, m.discoveryLost, m.silentAgents, m.silences, m.peerRefused)
	return m
}
