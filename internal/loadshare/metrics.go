// This file holds load sharing's Prometheus metrics.

package loadshare

import "github.com/prometheus/client_golang/prometheus"

// Metrics are load sharing's Prometheus metrics.
type Metrics struct {
	peerMessages *prometheus.CounterVec
}

// NewMetrics registers load sharing's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{}
	m.peerMessages = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_peer_load_messages_total",
		Help: "Load announcements exchanged with router replicas, by direction."}, []string{"direction"})
	reg.MustRegister(m.peerMessages)
	return m
}
