package follow

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"kvrouter/internal/cost"
	"kvrouter/internal/discovery"
	"kvrouter/internal/router"
)

func TestPeerAllowCheck(t *testing.T) {
	allow, err := ParsePeerAllow([]string{"10.1.0.0/16, 192.168.7.9", "fd00::/8"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		url, endpoint string
		allow         PeerAllow
		ok            bool
	}{
		{"http://10.0.0.5:8000", "tcp://10.0.0.5:25000", nil, true},
		{"http://gpu-3.internal:8000", "tcp://GPU-3.internal:25000", nil, true},
		{"http://[fd00::1]:8000", "tcp://[fd00:0::1]:25000", nil, true},
		{"http://localhost:8000", "tcp://127.0.0.1:25000", nil, true},
		{"http://10.0.0.5:8000", "tcp://10.0.0.6:25000", nil, false},
		{"http://10.0.0.5:8000", "tcp://169.254.169.254:80", nil, false},
		{"http://10.0.0.5:8000", "tcp://127.0.0.1:25000", nil, false},
		{"http://gpu-3:8000", "tcp://10.1.2.3:25000", nil, false},
		{"http://gpu-3:8000", "tcp://10.1.2.3:25000", allow, true},
		{"http://gpu-3:8000", "tcp://192.168.7.9:25000", allow, true},
		{"http://gpu-3:8000", "tcp://192.168.7.10:25000", allow, false},
		{"http://gpu-3:8000", "tcp://[fd12::3]:25000", allow, true},
		{"http://gpu-3:8000", "tcp://gpu-4:25000", allow, false}, // names are not resolved
		{"http://10.0.0.5:8000", "ipc:///tmp/runner", nil, false},
		{"http://10.0.0.5:8000", "tcp://10.0.0.5", nil, false},
	}
	for _, tc := range tests {
		err := tc.allow.check(tc.url, map[int]string{0: "tcp://" + strings.TrimPrefix(tc.url, "http://"), 1: tc.endpoint})
		if (err == nil) != tc.ok {
			t.Errorf("%s from %s (allow %v): err %v, want ok %v", tc.endpoint, tc.url, tc.allow, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), tc.endpoint) {
			t.Errorf("the error does not name the endpoint: %v", err)
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "gpu-3", "10.0.0.0/8;"} {
		if _, err := ParsePeerAllow([]string{bad}); err == nil || !strings.Contains(err.Error(), "--peer-allow") {
			t.Errorf("%q: err %v", bad, err)
		}
	}
}

// TestRegistrationPointingElsewhere: a registration whose runner endpoint
// is not on its worker's host is no hint source nor target (whoever can
// publish in discovery would point engines' pulls anywhere), and is
// counted; within --peer-allow it is taken.
func TestRegistrationPointingElsewhere(t *testing.T) {
	for _, tc := range []struct {
		allow   []string
		refused bool
	}{{nil, true}, {[]string{"10.9.0.0/16"}, false}} {
		r, err := router.New(router.Config{Weights: cost.DefaultWeights(), NoHints: true})
		if err != nil {
			t.Fatal(err)
		}
		allow, err := ParsePeerAllow(tc.allow)
		if err != nil {
			t.Fatal(err)
		}
		d := &Discovery{Router: r, Metrics: NewMetrics(prometheus.NewRegistry()), Log: slog.New(slog.DiscardHandler), Now: time.Now,
			PeerAllow: allow, followers: map[string]*follower{}, refused: map[string]string{}}
		w := discovery.Worker{ID: "w", Model: "m", URL: "http://10.0.0.5:8000", Engine: "sglang", BlockSize: 4, DPSize: 1}
		w.RuntimeData, _ = w.RuntimeData.Set("router_hint_source_control_endpoints", map[string]string{"0": "tcp://10.9.9.9:6379"})
		w.RuntimeData, _ = w.RuntimeData.Set("router_hint_worker_type", "aggregated")
		w.RuntimeData, _ = w.RuntimeData.Set("router_hint", true)
		ch := make(chan discovery.Change, 3)
		// A lease refresh puts the same registration again: counted once.
		ch <- discovery.Change{Op: discovery.OpPut, ID: "w", Worker: w}
		ch <- discovery.Change{Op: discovery.OpPut, ID: "w", Worker: w}
		ch <- discovery.Change{Op: discovery.OpSynced}
		close(ch)
		d.watch(context.Background(), ch)
		got, ok := r.Worker("w")
		if !ok {
			t.Fatal("the worker is not routed to at all")
		}
		var m dto.Metric
		d.Metrics.peerRefused.Write(&m)
		if tc.refused {
			if got.Capability.CanConsume || len(got.Capability.Endpoints) != 0 || !strings.Contains(got.Refusal, "--peer-allow") ||
				m.GetCounter().GetValue() != 1 {
				t.Fatalf("refused registration taken: %+v, counted %v", got, m.GetCounter().GetValue())
			}
			continue
		}
		if !got.Capability.CanConsume || got.Capability.Endpoints[0] != "tcp://10.9.9.9:6379" || m.GetCounter().GetValue() != 0 {
			t.Fatalf("allowed registration refused: %+v", got)
		}
	}
}
