package frontdoor

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"kvrouter/internal/cost"
	"kvrouter/internal/router"
	"kvrouter/internal/tokenizer"
	"kvrouter/internal/upstream"
)

type noLoad struct{}

func (noLoad) Start(string, cost.Rank, float64, float64) {}
func (noLoad) Prefilled(string)                          {}
func (noLoad) Finish(string)                             {}

// contexts are fixed model contexts.
type contexts map[string]int

func (c contexts) MaxModelLen(model string) int { return c[model] }

// front is a front door on loopback that routes model "m" to one engine.
type front struct {
	s    *Server
	addr string // host:port
	// bodies counts requests whose handler got bytes of the body: their
	// buffer exists by then.
	bodies atomic.Int64
}

func newFront(t *testing.T, engine http.Handler, edit func(*Server)) *front {
	t.Helper()
	eng := httptest.NewServer(engine)
	t.Cleanup(eng.Close)
	r, err := router.New(router.Config{Weights: cost.DefaultWeights(), NoHints: true, ApproxTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := router.PlacementFor(router.EngineVLLM)
	if err := r.Upsert(router.Worker{ID: "w", Model: "m", URL: eng.URL, Engine: router.EngineVLLM, BlockSize: 16, DPSize: 1,
		Mode: router.ModeApproximate, Origin: router.OriginFlag, Placement: p}, time.Now()); err != nil {
		t.Fatal(err)
	}
	up := &upstream.Client{IdleTimeout: time.Second}
	t.Cleanup(up.CloseIdle)
	f := &front{s: &Server{Router: r, Tok: &Local{Model: tokenizer.Demo()}, Upstream: up,
		Metrics: NewMetrics(prometheus.NewRegistry(), nil), Log: quiet(), Now: time.Now, Load: noLoad{}}}
	if edit != nil {
		edit(f.s)
	}
	mux := http.NewServeMux()
	f.s.Mount(mux)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = &firstRead{ReadCloser: r.Body, n: &f.bodies}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	f.addr = srv.Listener.Addr().String()
	return f
}

// firstRead counts a body once its first bytes are read.
type firstRead struct {
	io.ReadCloser
	n    *atomic.Int64
	seen bool
}

func (b *firstRead) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 && !b.seen {
		b.seen = true
		b.n.Add(1)
	}
	return n, err
}

// announce opens a connection and sends a request head announcing
// length body bytes, then sent.
func (f *front) announce(t *testing.T, length int, sent string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: kvrouter\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", length, sent)
	return c
}

func (f *front) post(t *testing.T, path, body string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Post("http://"+f.addr+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// response reads the answer to a request sent on c.
func response(t *testing.T, c net.Conn) (*http.Response, string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// count reads a counter.
func count(c prometheus.Counter) float64 {
	var m dto.Metric
	c.Write(&m)
	return m.GetCounter().GetValue()
}

func heapNow() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// okEngine answers every completion.
var okEngine = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"choices":[{"text":"ok"}]}`)
})

// TestAnnouncedBodiesHoldLittle: clients that announce the largest body
// and send 150 bytes of it made the router reserve 32 MiB each before any
// byte arrived (100 of them: 3.2 GB of heap). Buffers now grow with the
// bytes.
func TestAnnouncedBodiesHoldLittle(t *testing.T) {
	f := newFront(t, okEngine, nil)
	const conns = 100
	before := heapNow()
	for range conns {
		f.announce(t, defaultMaxBody-1, `{"model":"m","prompt":"`+strings.Repeat("x", 128))
	}
	eventually(t, "every body started", func() bool { return f.bodies.Load() == conns })
	grew := int64(heapNow()) - int64(before)
	t.Logf("%d clients announcing %d MiB each: heap grew %.1f MiB, bodies hold %.1f MiB", conns, defaultMaxBody>>20,
		float64(grew)/(1<<20), float64(f.s.BodyBytes())/(1<<20))
	if grew > 48<<20 {
		t.Fatalf("heap grew %d bytes for %d clients that sent 150 bytes each", grew, conns)
	}
}

// TestBodyTimeout: a body that does not arrive within the deadline ends
// its request with a 408, and gives its memory back.
func TestBodyTimeout(t *testing.T) {
	f := newFront(t, okEngine, func(s *Server) { s.BodyTimeout = 200 * time.Millisecond })
	c := f.announce(t, 1000, `{"model":"m",`)
	resp, body := response(t, c)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(body, "--body-timeout") {
		t.Fatalf("%s: %s", resp.Status, body)
	}
	if n := count(f.s.Metrics.refused.WithLabelValues(refusedBodyTimeout)); n != 1 {
		t.Fatalf("body_timeout counted %v times", n)
	}
	eventually(t, "the budget back", func() bool { return f.s.BodyBytes() == 0 })
	// A request whose body came in time is not cut while it is answered:
	// the deadline is lifted once the body is in.
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(400 * time.Millisecond)
		io.WriteString(w, `{"choices":[]}`)
	})
	f = newFront(t, slow, func(s *Server) { s.BodyTimeout = 200 * time.Millisecond })
	if resp, body := f.post(t, "/v1/completions", `{"model":"m","prompt":"hi"}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s", resp.Status, body)
	}
}

// TestBodyBudget: past --max-body-memory, a body is refused with a 503 and
// Retry-After; the budget comes back as requests end.
func TestBodyBudget(t *testing.T) {
	f := newFront(t, okEngine, func(s *Server) { s.MaxBodyMemory = 2 << 20 })
	a := f.announce(t, 4<<20, `{"model":"m","prompt":"`+strings.Repeat("a", 700<<10))
	eventually(t, "the first body read", func() bool { return f.s.BodyBytes() >= 700<<10 })
	b := f.announce(t, 4<<20, "")
	go b.Write([]byte(`{"model":"m","prompt":"` + strings.Repeat("b", 1500<<10)))
	resp, body := response(t, b)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "--max-body-memory") {
		t.Fatalf("%s %v: %s", resp.Status, resp.Header, body)
	}
	if n := count(f.s.Metrics.refused.WithLabelValues(refusedBodyBusy)); n != 1 {
		t.Fatalf("body_busy counted %v times", n)
	}
	if n := count(f.s.Metrics.requests.WithLabelValues(outcomeOverloaded)); n != 1 {
		t.Fatalf("overloaded counted %v times", n)
	}
	a.Close()
	eventually(t, "the budget back", func() bool { return f.s.BodyBytes() == 0 })
	if resp, body := f.post(t, "/v1/completions", `{"model":"m","prompt":"hi"}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s", resp.Status, body)
	}
}

// TestPromptTooLong: a prompt longer than the model's context is refused
// with a 400 naming max_model_len; before it is tokenized when its bytes
// tell.
func TestPromptTooLong(t *testing.T) {
	f := newFront(t, okEngine, func(s *Server) { s.Context = contexts{"m": 50} })
	bound := tokenizer.Default().MaxBytesPerToken()
	ids := func(n int) string {
		b, _ := json.Marshal(make([]uint32, n))
		return string(b)
	}
	tests := []struct {
		name, path, body string
		status           int
		says             string
	}{
		{"text past the byte bound", "/v1/completions", `{"model":"m","prompt":"` + strings.Repeat("a", 50*bound+1) + `"}`, 400, "bytes"},
		{"text of too many tokens", "/v1/completions", `{"model":"m","prompt":"` + strings.Repeat("a ", 60) + `"}`, 400, "tokens"},
		{"token ids past the context", "/v1/completions", `{"model":"m","prompt":` + ids(51) + `}`, 400, "51 tokens"},
		{"token ids within", "/v1/completions", `{"model":"m","prompt":` + ids(50) + `}`, 200, ""},
		{"chat past the byte bound", "/v1/chat/completions",
			`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("a", 50*bound) + `"}]}`, 400, "bytes"},
		{"short text", "/v1/completions", `{"model":"m","prompt":"hello"}`, 200, ""},
	}
	refused := 0
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := f.post(t, tc.path, tc.body)
			if resp.StatusCode != tc.status || !strings.Contains(body, tc.says) {
				t.Fatalf("%s: %s", resp.Status, body)
			}
			if tc.status == 400 {
				refused++
				if !strings.Contains(body, "max_model_len") {
					t.Fatalf("the error does not name max_model_len: %s", body)
				}
			}
		})
	}
	if n := count(f.s.Metrics.refused.WithLabelValues(refusedPromptLong)); n != float64(refused) {
		t.Fatalf("prompt_too_long counted %v times, want %d", n, refused)
	}
}

// TestLongPromptNotTokenized: an 8 MB prompt for a context of 32,768
// tokens was tokenized whole, allocating 29 times its size (240 MB); it is
// refused on its size, for about four times (32 MB: its body and parse).
func TestLongPromptNotTokenized(t *testing.T) {
	f := newFront(t, okEngine, func(s *Server) { s.Context = contexts{"m": 32768} })
	body := `{"model":"m","prompt":"` + strings.Repeat("lorem ipsum dolor sit amet ", 8<<20/27) + `"}`
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	resp, msg := f.post(t, "/v1/completions", body)
	runtime.ReadMemStats(&after)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(msg, "max_model_len") {
		t.Fatalf("%s: %.300s", resp.Status, msg)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("a %d MB prompt refused with %.1f MB allocated", len(body)>>20, float64(alloc)/(1<<20))
	if alloc > 8*uint64(len(body)) {
		t.Fatalf("refusing a %d-byte prompt allocated %d bytes", len(body), alloc)
	}
}

// TestAnswerTooLarge: a non-streamed answer past the cap was cut and
// passed on as a 200; it is a 502 that says why.
func TestAnswerTooLarge(t *testing.T) {
	defer func(n int) { maxResponse = n }(maxResponse)
	maxResponse = 64 << 10
	size := maxResponse
	engine := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"text":"`+strings.Repeat("x", size-len(`{"choices":[{"text":""}]}`))+`"}]}`)
	})
	f := newFront(t, engine, nil)
	if resp, body := f.post(t, "/v1/completions", `{"model":"m","prompt":"hi"}`); resp.StatusCode != http.StatusOK || len(body) != size {
		t.Fatalf("at the cap: %s, %d bytes", resp.Status, len(body))
	}
	size++
	resp, body := f.post(t, "/v1/completions", `{"model":"m","prompt":"hi"}`)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "exceeds") {
		t.Fatalf("past the cap: %s: %.200s", resp.Status, body)
	}
	if n := count(f.s.Metrics.oversize.WithLabelValues(oversizeAnswer)); n != 1 {
		t.Fatalf("oversize answers counted %v times", n)
	}
}

// TestEventTooLarge: one event of a stream past the cap ends the stream
// with an error event (no [DONE]), or is a 502 when it is the first.
func TestEventTooLarge(t *testing.T) {
	defer func(n int) { maxEvent = n }(maxEvent)
	maxEvent = 64 << 10
	var first atomic.Bool
	engine := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		if !first.Load() {
			io.WriteString(w, "data: {\"choices\":[{\"text\":\"a\"}]}\n\n")
			w.(http.Flusher).Flush()
		}
		// One line that never ends, as a broken engine might send.
		chunk := strings.Repeat("y", 4096)
		io.WriteString(w, "data: ")
		for range 64 {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
		io.WriteString(w, "\n\ndata: [DONE]\n\n")
	})
	f := newFront(t, engine, nil)
	resp, body := f.post(t, "/v1/completions", `{"model":"m","prompt":"hi","stream":true}`)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(body, "data: {\"choices\"") ||
		!strings.Contains(body, `"error"`) || !strings.Contains(body, "exceeds") || strings.Contains(body, "[DONE]") {
		t.Fatalf("%s: %.300q", resp.Status, body)
	}
	first.Store(true)
	resp, body = f.post(t, "/v1/completions", `{"model":"m","prompt":"hi","stream":true}`)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "exceeds") {
		t.Fatalf("%s: %.300q", resp.Status, body)
	}
	if n := count(f.s.Metrics.oversize.WithLabelValues(oversizeEvent)); n != 2 {
		t.Fatalf("oversize events counted %v times", n)
	}
}
