package contextlen

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"kvrouter/internal/cost"
	"kvrouter/internal/router"
)

func engine(t *testing.T, models, serverInfo string) string {
	t.Helper()
	mux := http.NewServeMux()
	if models != "" {
		mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, models) })
	}
	if serverInfo != "" {
		mux.HandleFunc("GET /get_server_info", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, serverInfo) })
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestPoll(t *testing.T) {
	r, err := router.New(router.Config{Weights: cost.DefaultWeights(), NoHints: true, ApproxTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	add := func(id, model, url string) {
		t.Helper()
		if err := r.Upsert(router.Worker{ID: id, Model: model, URL: url, Engine: router.EngineVLLM, BlockSize: 16, DPSize: 1,
			Mode: router.ModeApproximate}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	// vLLM: the card of the model; SGLang without it on its cards: its
	// server info; an engine that reports nothing; another model.
	add("vllm", "m", engine(t, `{"data":[{"id":"other","max_model_len":99999},{"id":"m","max_model_len":4096}]}`, ""))
	add("sglang", "m", engine(t, `{"data":[{"id":"m"}]}`, `{"context_length":8192,"page_size":64}`))
	add("n", "n", engine(t, `{"data":[{"id":"served-as-something-else","max_model_len":2048}]}`, ""))
	// A worker that reports nothing may take any prompt: its model is
	// not bounded.
	add("q", "q", engine(t, `{"data":[{"id":"q","max_model_len":1024}]}`, ""))
	add("mute", "q", engine(t, `{"data":[{"id":"q","max_model_len":null}]}`, `{"context_length":null}`))
	p := &Poller{Router: r, Client: http.DefaultClient}
	now := time.Now()
	p.Poll(context.Background(), now)
	for model, want := range map[string]int{"m": 8192, "n": 2048, "q": 0, "x": 0} {
		if got := p.MaxModelLen(model); got != want {
			t.Errorf("MaxModelLen(%q) = %d, want %d", model, got, want)
		}
	}
	// A worker that leaves takes its report along.
	r.Remove("sglang", now)
	p.Poll(context.Background(), now)
	if got := p.MaxModelLen("m"); got != 4096 {
		t.Fatalf("after the SGLang worker left: %d, want 4096", got)
	}
}

// TestPollAsksEachURLOnce: workers behind one URL are asked once per poll,
// and a known length is not asked again before its refresh.
func TestPollAsksEachURLOnce(t *testing.T) {
	var asked atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		io.WriteString(w, `{"data":[{"id":"m","max_model_len":1000}]}`)
	}))
	t.Cleanup(srv.Close)
	r, err := router.New(router.Config{Weights: cost.DefaultWeights(), NoHints: true, ApproxTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		if err := r.Upsert(router.Worker{ID: id, Model: "m", URL: srv.URL, Engine: router.EngineVLLM, BlockSize: 16, DPSize: 1,
			Mode: router.ModeApproximate}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	p := &Poller{Router: r, Client: http.DefaultClient}
	now := time.Now()
	p.Poll(context.Background(), now)
	p.Poll(context.Background(), now.Add(time.Minute))
	if n := asked.Load(); n != 1 || p.MaxModelLen("m") != 1000 {
		t.Fatalf("asked %d times, length %d", n, p.MaxModelLen("m"))
	}
	p.Poll(context.Background(), now.Add(refreshKnown))
	if n := asked.Load(); n != 2 {
		t.Fatalf("asked %d times after the refresh", n)
	}
}
