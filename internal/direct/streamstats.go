// This file holds the event streams' transport counters as metrics.

package direct

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"kvrouter/internal/kvstream"
)

// streamStats exports the counters of every event stream subscriber:
// messages dropped for their shape, connections dropped for oversize,
// malformed or handshake-failing traffic, refused peers.
type streamStats struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	subs map[string]*kvstream.Subscriber // by endpoint
}

func newStreamStats() *streamStats {
	return &streamStats{
		desc: prometheus.NewDesc("kvrouter_event_stream_total",
			"Engine event stream transport counters (kvstream.Stats), by subscribed endpoint.", []string{"endpoint", "counter"}, nil),
		subs: make(map[string]*kvstream.Subscriber),
	}
}

// add exports sub's counters under endpoint.
func (c *streamStats) add(endpoint string, sub *kvstream.Subscriber) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.subs[endpoint] = sub
}

func (c *streamStats) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *streamStats) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for ep, sub := range c.subs {
		for k, v := range sub.Stats().All() {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(v), ep, k)
		}
	}
}
