package tokcheck

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"kvrouter/internal/frontdoor"
	"kvrouter/internal/mocker"
	"kvrouter/internal/router"
)

func TestFirstDiff(t *testing.T) {
	for _, tc := range []struct {
		a, b []uint32
		want int
	}{
		{nil, nil, -1},
		{[]uint32{1, 2, 3}, []uint32{1, 2, 3}, -1},
		{[]uint32{1, 2, 3}, []uint32{1, 9, 3}, 1},
		{[]uint32{1, 2, 3}, []uint32{1, 2}, 2},
		{[]uint32{1}, []uint32{1, 2}, 1},
		{nil, []uint32{4}, 0},
		{[]uint32{5}, []uint32{4}, 0},
	} {
		if got := FirstDiff(tc.a, tc.b); got != tc.want {
			t.Errorf("FirstDiff(%v, %v) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := FirstDiff(tc.b, tc.a); got != tc.want {
			t.Errorf("FirstDiff(%v, %v) = %d, want %d", tc.b, tc.a, got, tc.want)
		}
	}
	d := compare("prompt", []uint32{1, 2}, []uint32{1, 3, 4})
	if d == nil || d.At != 1 || *d.RouterID != 2 || *d.EngineID != 3 || d.RouterLen != 2 || d.EngineLen != 3 {
		t.Fatalf("compare: %+v", d)
	}
	if d := compare("chat", []uint32{1}, []uint32{1, 3}); d == nil || d.RouterID != nil || *d.EngineID != 3 {
		t.Fatalf("compare past the end: %+v", d)
	}
	if d := compare("chat", []uint32{1}, []uint32{1}); d != nil {
		t.Fatalf("equal: %+v", d)
	}
}

// freePort returns a TCP port free on every interface right now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startMocker starts a simulated engine on loopback.
func startMocker(t *testing.T, flavor mocker.Flavor, tokenizer, chatTemplate string) *mocker.Engine {
	t.Helper()
	e, err := mocker.Start(mocker.Config{Listen: "127.0.0.1:0", Flavor: flavor, Tokenizer: tokenizer, ChatTemplate: chatTemplate,
		ControlPort: freePort(t), EventsEndpoint: "tcp://127.0.0.1:" + strconv.Itoa(freePort(t)), ReplayEndpoint: "none",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// logBuffer is a logger whose output a test reads.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestCheckMocker checks the router's tokenizer against simulated engines:
// the same tokenizer agrees, another one is caught with the position where
// the ids part, and SGLang's /tokenize, which renders no chats, is given
// the rendered chat's text.
func TestCheckMocker(t *testing.T) {
	demo, err := frontdoor.LoadLocal(frontdoor.TokenizerDemo, "", "")
	if err != nil {
		t.Fatal(err)
	}
	const other = "../tokenizer/testdata/llama3-mini.json"
	tests := []struct {
		name       string
		local      *frontdoor.Local
		flavor     mocker.Flavor
		tokenizer  string
		template   string
		compared   bool
		mismatch   bool
		chat       bool
		wantLog    string
		wantDiffAt int
	}{
		{name: "same, vllm", local: demo, flavor: mocker.VLLM, compared: true, chat: true},
		{name: "same, sglang", local: demo, flavor: mocker.SGLang, compared: true},
		{name: "other tokenizer", local: demo, flavor: mocker.VLLM, tokenizer: other, template: "chatml", compared: true, mismatch: true, chat: true,
			wantLog: "tokenizer mismatch"},
		{name: "engine mode, vllm", flavor: mocker.VLLM, chat: true},
		{name: "engine mode, sglang", flavor: mocker.SGLang, wantLog: "SGLang's /tokenize does not render chats"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := startMocker(t, tc.flavor, tc.tokenizer, tc.template)
			engine := router.EngineVLLM
			if tc.flavor == mocker.SGLang {
				engine = router.EngineSGLang
			}
			var logs logBuffer
			reg := prometheus.NewRegistry()
			c := &Checker{Local: tc.local, Client: http.DefaultClient, Every: time.Minute, Now: time.Now,
				Models:  func() []string { return []string{mocker.DefaultModel} },
				Workers: func(string) []router.Worker { return []router.Worker{{ID: "w0", URL: e.URL(), Engine: engine}} },
				Log:     slog.New(slog.NewTextHandler(&logs, nil)), Mismatch: NewGauge(reg)}
			c.Round(context.Background())
			st := c.Statuses()
			if len(st) != 1 {
				t.Fatalf("statuses %+v", st)
			}
			s := st[0]
			if s.Error != "" || s.Compared != tc.compared || s.Mismatch != tc.mismatch || s.ChatChecked != tc.chat || s.Worker != "w0" {
				t.Fatalf("status %+v", s)
			}
			if tc.mismatch {
				if len(s.Diffs) != 2 || s.Diffs[0].Probe != "prompt" || s.Diffs[1].Probe != "chat" {
					t.Fatalf("diffs %+v", s.Diffs)
				}
				prompt := ProbePrompt
				engineIDs, err := frontdoor.AskTokenize(context.Background(), http.DefaultClient, e.URL(),
					&frontdoor.TokenizeQuery{Prompt: &prompt, AddSpecialTokens: true})
				if err != nil {
					t.Fatal(err)
				}
				local := tc.local.Text(prompt, true)
				if d := s.Diffs[0]; d.RouterLen != len(local) || d.EngineLen != len(engineIDs) || d.At != FirstDiff(local, engineIDs) ||
					!strings.Contains(logs.String(), "position="+strconv.Itoa(d.At)) {
					t.Errorf("diff %+v; log %s", d, logs.String())
				}
			}
			if tc.wantLog != "" && !strings.Contains(logs.String(), tc.wantLog) {
				t.Errorf("log lacks %q: %s", tc.wantLog, logs.String())
			}
			if tc.wantLog == "" && logs.String() != "" {
				t.Errorf("logged %s", logs.String())
			}
			want := 0.0
			if tc.mismatch {
				want = 1
			}
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			if tc.compared != (len(mfs) == 1) {
				t.Fatalf("gauge families %v", mfs)
			}
			if tc.compared {
				var m dto.Metric
				if err := c.Mismatch.WithLabelValues(mocker.DefaultModel).Write(&m); err != nil || m.GetGauge().GetValue() != want {
					t.Errorf("kvrouter_tokenizer_mismatch %v, want %v", m.GetGauge().GetValue(), want)
				}
			}
		})
	}
}

// TestCheckEngineErrors: an engine without /tokenize is an error that
// names --tokenizer, and a model without workers is not checked.
func TestCheckEngineErrors(t *testing.T) {
	e := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(e.Close)
	var logs logBuffer
	c := &Checker{Client: e.Client(), Every: time.Minute, Now: time.Now,
		Models: func() []string { return []string{"m", "orphan"} },
		Workers: func(model string) []router.Worker {
			if model == "orphan" {
				return nil
			}
			return []router.Worker{{ID: "w", URL: e.URL, Engine: router.EngineVLLM}}
		},
		Log: slog.New(slog.NewTextHandler(&logs, nil))}
	c.Round(context.Background())
	st := c.Statuses()
	if len(st) != 1 || st[0].Model != "m" || !strings.Contains(st[0].Error, "404") || !strings.Contains(logs.String(), "--tokenizer") {
		t.Fatalf("statuses %+v, log %s", st, logs.String())
	}
}

// TestRun: with injected time, each model is checked when first seen and
// again once Every has passed, the workers taken in turn.
func TestRun(t *testing.T) {
	var asked atomic.Int64
	var mu sync.Mutex
	mux := http.NewServeMux()
	mux.HandleFunc("POST /tokenize", func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		io.Copy(io.Discard, r.Body)
		json.NewEncoder(w).Encode(map[string]any{"tokens": []uint32{1}})
	})
	e := httptest.NewServer(mux)
	t.Cleanup(e.Close)
	var now atomic.Int64
	now.Store(time.Unix(1000, 0).UnixNano())
	models := []string{"a"}
	ticks := make(chan time.Time)
	waits := make(chan time.Duration)
	stopped := make(chan struct{}) // closed once the test no longer reads waits
	c := &Checker{Client: e.Client(), Every: time.Minute,
		Now: func() time.Time { return time.Unix(0, now.Load()) },
		After: func(d time.Duration) <-chan time.Time {
			select {
			case waits <- d:
			case <-stopped:
			}
			return ticks
		},
		Models: func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), models...) },
		Workers: func(string) []router.Worker {
			return []router.Worker{{ID: "w1", URL: e.URL + "/", Engine: router.EngineVLLM}, {ID: "w2", URL: e.URL, Engine: router.EngineVLLM}}
		},
		Log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	// A round is over when the loop waits for the next one.
	wait := func() {
		t.Helper()
		if d := <-waits; d != poll {
			t.Fatalf("waits %v, want %v", d, poll)
		}
	}
	tick := func(advance time.Duration) {
		t.Helper()
		now.Add(int64(advance))
		ticks <- time.Time{}
		wait()
	}
	wait()
	if n := asked.Load(); n != 1 {
		t.Fatalf("asked %d times at start", n)
	}
	mu.Lock()
	models = append(models, "b")
	mu.Unlock()
	tick(30 * time.Second) // b is new; a is 30 s old
	if n := asked.Load(); n != 2 {
		t.Fatalf("asked %d times after 30 s and a new model", n)
	}
	tick(31 * time.Second) // a is 61 s old, b 31 s
	if n := asked.Load(); n != 3 {
		t.Fatalf("asked %d times after a minute", n)
	}
	close(stopped)
	cancel()
	select {
	case ticks <- time.Time{}:
	case <-done:
	}
	<-done
	for _, s := range c.Statuses() {
		if s.Error != "" {
			t.Errorf("%+v", s)
		}
	}
	if st := c.Statuses(); len(st) != 2 || st[0].Model != "a" || st[0].Worker != "w2" || st[1].Worker != "w1" {
		t.Fatalf("statuses %+v: want a checked twice (w1 then w2), b once", st)
	}
}
