package direct

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"kvrouter/internal/kvstream"
)

// TestStreamStatsExportsEveryCounter: each subscriber's kvstream counters
// are on the registry under its endpoint.
func TestStreamStatsExportsEveryCounter(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	const ep = "tcp://10.0.0.1:5557"
	sub, err := kvstream.NewSubscriber(kvstream.Config{Endpoint: ep, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	m.streams.add(ep, sub)
	want := map[string]bool{}
	for k := range sub.Stats().All() {
		want[k] = true
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() != "kvrouter_event_stream_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["endpoint"] != ep {
				t.Fatalf("sample labels %v", labels)
			}
			got[labels["counter"]] = true
		}
	}
	if len(got) != len(want) || !got["oversize"] || !got["handshake_failures"] || !got["wrong_frame_count"] {
		t.Fatalf("counters %v, want %v", got, want)
	}
}
