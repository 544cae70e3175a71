// This file holds the router state gauges and the service-wide collectors.

package admin

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"kvrouter/internal/kvevents"
	"kvrouter/internal/router"
)

// Register adds to reg the router state gauges, read from stats at scrape
// time, and the Go runtime's and the process's collectors.
func Register(reg prometheus.Registerer, stats func() router.Stats) {
	reg.MustRegister(&stateCollector{stats: stats}, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
}

// stateCollector reports the router's state as gauges at scrape time.
type stateCollector struct {
	stats func() router.Stats
}

var _ prometheus.Collector = (*stateCollector)(nil)

var (
	descBlocks    = prometheus.NewDesc("kvrouter_index_blocks", "Indexed block residencies by tier (as of the last size refresh).", []string{"tier"}, nil)
	descWorkers   = prometheus.NewDesc("kvrouter_workers", "Workers by mode: events (the router sees their KV events) or approximate (it guesses from its own decisions).", []string{"mode"}, nil)
	descDown      = prometheus.NewDesc("kvrouter_workers_down", "Workers marked down: they refused a connection or failed their health probes, and get no requests.", nil, nil)
	descSources   = prometheus.NewDesc("kvrouter_sources", "Inventory sources (worker ranks and cache owners) with events.", nil, nil)
	descNotReady  = prometheus.NewDesc("kvrouter_sources_not_ready", "Sources that give no hints now: stream resyncing, gap not healed, worker down, or discovery watch lost.", nil, nil)
	descDetached  = prometheus.NewDesc("kvrouter_detached_owners", "Cache owners whose worker left, still hint sources until their TTL.", nil, nil)
	descDiscovery = prometheus.NewDesc("kvrouter_discovery_live", "1 while the discovery watch is in step, 0 while it is lost.", nil, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBlocks, descWorkers, descDown, descSources, descNotReady, descDetached, descDiscovery} {
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
	ch <- prometheus.MustNewConstMetric(descDown, prometheus.GaugeValue, float64(st.WorkersDown))
	ch <- prometheus.MustNewConstMetric(descSources, prometheus.GaugeValue, float64(st.Sources))
	ch <- prometheus.MustNewConstMetric(descNotReady, prometheus.GaugeValue, float64(st.NotReady))
	ch <- prometheus.MustNewConstMetric(descDetached, prometheus.GaugeValue, float64(st.DetachedOwners))
	live := 0.0
	if st.DiscoveryLive {
		live = 1
	}
	ch <- prometheus.MustNewConstMetric(descDiscovery, prometheus.GaugeValue, live)
}
