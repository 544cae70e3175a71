// This file holds the agent's Prometheus metrics and its /metrics and /healthz server.

package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"kvrouter/internal/bus"
	"kvrouter/internal/ingest"
)

// Metric names; every one starts with metricPrefix.
const metricPrefix = "kvrouter_agent_"

var (
	descBatches   = desc("engine_batches_total", "Engine event batches received, live or replayed.")
	descEvents    = desc("engine_events_total", "Engine events decoded from accepted batches.")
	descRejected  = desc("batches_rejected_total", "Engine batches rejected whole (the rank is rebuilt).", "reason")
	descDropped   = desc("events_dropped_total", "Events or ops left out without rejecting their batch.", "reason")
	descDecDrop   = desc("decoder_events_dropped_total", "Events the decoder dropped at the wire boundary.", "reason")
	descGaps      = desc("gaps_total", "Engine stream gaps opened.")
	descHealed    = desc("gaps_healed_total", "Engine stream gaps healed by replay.")
	descResets    = desc("resets_total", "DP rank inventories emptied and rebuilt.", "reason")
	descPublished = desc("published_messages_total", "Messages committed to the event plane.", "kind")
	descPubErrs   = desc("publish_errors_total", "Messages lost after their change was applied (consumers resync).")
	descReady     = desc("source_ready", "1 while a source may be named by hints.", "source")
	descBlocks    = desc("index_blocks", "Blocks in the agent's local inventory.")
	descStream    = desc("stream_total", "Engine stream transport counters per DP rank.", "dp_rank", "counter")
	descNATS      = desc("nats_connected", "1 while the NATS connection is up.")
)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(metricPrefix+name, help, labels, nil)
}

// collector reads the agent's counters at scrape time.
type collector struct {
	a *Agent
	b *bus.Bus
}

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBatches, descEvents, descRejected, descDropped, descDecDrop, descGaps,
		descHealed, descResets, descPublished, descPubErrs, descReady, descBlocks, descStream, descNATS} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(descNATS, b2f(c.b.Conn.IsConnected()))
	core := c.a.core.Load()
	if core == nil {
		return
	}
	st := core.Stats()
	counter(descBatches, st.Messages)
	counter(descEvents, st.Events)
	counter(descGaps, st.Gaps)
	counter(descHealed, st.Healed)
	counter(descPubErrs, st.PublishErrors)
	byClass := [...]*prometheus.Desc{ingest.ClassReject: descRejected, ingest.ClassDrop: descDropped, ingest.ClassReset: descResets}
	for r, v := range st.Counts {
		reason := ingest.Reason(r)
		counter(byClass[reason.Class()], v, reason.String())
	}
	for k, v := range st.Published {
		counter(descPublished, v, k)
	}
	ds := core.DecoderStats()
	counter(descDecDrop, ds.DroppedMedium, "medium")
	counter(descDecDrop, ds.DroppedOwnership, "ownership")
	counter(descDecDrop, ds.UnknownTags, "unknown_tag")
	for src, r := range core.Readiness() {
		gauge(descReady, b2f(r), src.String())
	}
	gauge(descBlocks, float64(core.Index().Len()))
	for i, s := range c.a.subs {
		dp := strconv.Itoa(core.dps[i])
		for k, v := range s.Stats().All() {
			counter(descStream, v, dp, k)
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// serveMetrics serves /metrics and /healthz on --metrics-listen until ctx
// ends.
func (a *Agent) serveMetrics(ctx context.Context, wg *sync.WaitGroup, b *bus.Bus) (*http.Server, error) {
	// The agent's own registry, so that agents in one process (tests) do
	// not share global collectors.
	reg := prometheus.NewRegistry()
	if err := reg.Register(collector{a: a, b: b}); err != nil {
		return nil, fmt.Errorf("agent: metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", a.healthz)
	l, err := net.Listen("tcp", a.cfg.MetricsListen)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen %s: %w", a.cfg.MetricsListen, err)
	}
	srv := &http.Server{Handler: mux}
	a.metrics <- l.Addr()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Warn("agent: metrics server stopped", "err", err)
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-ctx.Done()
		srv.Close()
	}()
	return srv, nil
}

// healthz answers 200 once the worker is registered, with each source's
// readiness; 503 before.
func (a *Agent) healthz(w http.ResponseWriter, _ *http.Request) {
	type health struct {
		Registered bool            `json:"registered"`
		Ready      map[string]bool `json:"ready"`
	}
	h := health{Ready: map[string]bool{}}
	select {
	case <-a.registered:
		h.Registered = true
	default:
	}
	if core := a.core.Load(); core != nil {
		for src, r := range core.Readiness() {
			h.Ready[src.String()] = r
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if !h.Registered {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(h)
}
