package enginemetrics

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"kvrouter/internal/cost"
	"kvrouter/internal/router"
)

// TestParseEngineMetrics reads testdata/enginemetrics/NAME.prom and
// compares with NAME.json.
func TestParseEngineMetrics(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "enginemetrics", "*.prom"))
	if len(files) == 0 {
		t.Fatal("no cases")
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".prom")
		t.Run(name, func(t *testing.T) {
			text, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(strings.TrimSuffix(f, ".prom") + ".json")
			if err != nil {
				t.Fatal(err)
			}
			var tc struct {
				Worker router.Worker
				Want   map[string]router.EngineLoad
			}
			if err := json.Unmarshal(raw, &tc); err != nil {
				t.Fatal(err)
			}
			want := map[int]router.EngineLoad{}
			for k, v := range tc.Want {
				r, _ := strconv.Atoi(k)
				want[r] = v
			}
			if got := parseEngineMetrics(text, tc.Worker); !reflect.DeepEqual(got, want) {
				t.Fatalf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

// TestFailedPollClearsLoad: once a worker's /metrics stops answering, its
// last figures are dropped rather than kept frozen.
func TestFailedPollClearsLoad(t *testing.T) {
	var failing atomic.Bool
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if failing.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "vllm:num_requests_running 3\nvllm:num_requests_waiting 2\n")
	}))
	defer s.Close()
	r, err := router.New(router.Config{Weights: cost.DefaultWeights(), NoHints: true})
	if err != nil {
		t.Fatal(err)
	}
	w := router.Worker{ID: "w", Model: "m", URL: s.URL, Engine: router.EngineVLLM, BlockSize: 4, DPSize: 1}
	if err := r.Upsert(w, time.Now()); err != nil {
		t.Fatal(err)
	}
	p := &Poller{Router: r, Client: s.Client(), Interval: time.Second, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	engine := func() *router.EngineLoad {
		ws, _ := r.View()
		return ws[0].Ranks[0].Engine
	}
	p.poll(context.Background(), w)
	if l := engine(); l == nil || l.Running != 3 || l.Waiting != 2 {
		t.Fatalf("engine load %+v", l)
	}
	failing.Store(true)
	p.poll(context.Background(), w)
	if l := engine(); l != nil {
		t.Fatalf("engine load %+v kept after a failed poll", l)
	}
}
