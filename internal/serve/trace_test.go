package serve

import (
	"net/http"
	"sync"
	"testing"

	"kvrouter/internal/direct"
	"kvrouter/internal/frontdoor"
)

// TestTrace: every request sent to a worker reports its timing once, and
// one that never reaches a worker reports nothing.
func TestTrace(t *testing.T) {
	h := newHarness(t)
	e := newEngine(t, testModel)
	var mu sync.Mutex
	var got []frontdoor.Timing
	g := h.service(func(o *Options) {
		o.Workers = []direct.WorkerSpec{spec(t, e, "")}
		o.Trace = func(tm frontdoor.Timing) {
			mu.Lock()
			got = append(got, tm)
			mu.Unlock()
		}
	})
	waitWorkers(t, g, 1)
	for i := range 3 {
		if status, _, b := post(t, g.url(), "/v1/completions", completionBody(prompt(uint32(i), 3), "")); status != http.StatusOK {
			t.Fatalf("status %d: %s", status, b)
		}
	}
	if status, _, _ := post(t, g.url(), "/v1/completions", `{"model":"nobody","prompt":"x"}`); status != http.StatusNotFound {
		t.Fatalf("unknown model: status %d", status)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 || len(e.requests()) != 3 {
		t.Fatalf("%d timings for %d requests sent", len(got), len(e.requests()))
	}
	for _, tm := range got {
		if tm.Added <= 0 || tm.Decide <= 0 || tm.Tokenize < 0 || tm.Decide > tm.Added {
			t.Fatalf("timing %+v: want a positive added time that covers the decision", tm)
		}
	}
}
