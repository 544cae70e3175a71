package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"kvrouter/internal/direct"
	"kvrouter/internal/frontdoor"
)

// logRecorder keeps what a service logs, for tests of what operators read.
type logRecorder struct {
	mu   sync.Mutex
	recs []logRec
}

type logRec struct {
	msg   string
	attrs map[string]string
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecorder) WithGroup(string) slog.Handler            { return l }

func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	rec := logRec{msg: r.Message, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	l.mu.Lock()
	l.recs = append(l.recs, rec)
	l.mu.Unlock()
	return nil
}

// with returns the records whose message contains s.
func (l *logRecorder) with(s string) []logRec {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []logRec
	for _, r := range l.recs {
		if strings.Contains(r.msg, s) {
			out = append(out, r)
		}
	}
	return out
}

// getStatus is get for answers that may fail.
func getStatus(t testing.TB, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// metricValue reads one sample off the service's /metrics.
func metricValue(t testing.TB, g *Service, sample string) float64 {
	t.Helper()
	for line := range strings.SplitSeq(string(get(t, g.admin()+"/metrics")), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	t.Fatalf("metrics lack %s", sample)
	return 0
}

// deadURL is a loopback URL nothing listens on.
func deadURL(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	return "http://" + l.Addr().String()
}

func specURL(t testing.TB, url string) direct.WorkerSpec {
	t.Helper()
	s, err := direct.ParseWorkerSpec("url=" + url + ",block_size=4,model=" + testModel)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestReadyz: /healthz says the process lives; /readyz whether a request
// can be served, with the reason when not.
func TestReadyz(t *testing.T) {
	h := newHarness(t)
	g := h.service(nil)
	if code, _ := getStatus(t, g.url()+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz %d", code)
	}
	type readiness struct {
		Status string `json:"status"`
		Reason string `json:"reason"`
	}
	ready := func(g *Service, wantCode int, wantReason string) {
		t.Helper()
		code, b := getStatus(t, g.url()+"/readyz")
		var r readiness
		if err := json.Unmarshal(b, &r); err != nil || code != wantCode || !strings.Contains(r.Reason, wantReason) ||
			(code == http.StatusOK) != (r.Status == "ready") {
			t.Fatalf("/readyz %d %s; want %d with reason %q", code, b, wantCode, wantReason)
		}
	}
	ready(g, http.StatusServiceUnavailable, "no worker is registered")
	e := newEngine(t, testModel)
	g = h.service(func(o *Options) { o.Workers = []direct.WorkerSpec{spec(t, e, "")} })
	waitWorkers(t, g, 1)
	ready(g, http.StatusOK, "")
	g.Router.ReportRefused(e.hostPort(), e.url(), "refused", time.Now())
	ready(g, http.StatusServiceUnavailable, "every worker is down")
	if n := metricValue(t, g, "kvrouter_workers_down"); n != 1 {
		t.Fatalf("kvrouter_workers_down %v", n)
	}
}

// TestHonestLogs: the warnings say what happened: no "retrying on
// another" without another, no tokenization failure for a model nobody
// serves.
func TestHonestLogs(t *testing.T) {
	h := newHarness(t)
	logs := &logRecorder{}
	g := h.service(func(o *Options) {
		o.Workers = []direct.WorkerSpec{specURL(t, deadURL(t))}
		o.Tokenizer = frontdoor.TokenizerEngine
		o.Log = slog.New(logs)
	})
	waitWorkers(t, g, 1)
	status, _, body := post(t, g.url(), "/v1/completions", completionBody(prompt(1, 2), ""))
	if status != http.StatusBadGateway || !strings.Contains(string(body), "refused") {
		t.Fatalf("the only worker refused: %d %s", status, body)
	}
	if r := logs.with("retrying on another"); len(r) > 0 {
		t.Fatalf("logged a retry without another worker: %+v", r)
	}
	if len(logs.with("no other worker")) != 1 {
		t.Fatalf("no warning that no other worker is left: %+v", logs.recs)
	}
	status, _, body = post(t, g.url(), "/v1/completions", `{"model":"nope","prompt":"hi"}`)
	if status != http.StatusNotFound || !strings.Contains(string(body), `model \"nope\" is not served`) {
		t.Fatalf("unknown model: %d %s", status, body)
	}
	if r := logs.with("tokenization failed"); len(r) > 0 {
		t.Fatalf("logged a tokenization failure for an unknown model: %+v", r)
	}
}

// rawEngine answers every connection with script, then resets it: an
// engine that dies while answering.
func rawEngine(t *testing.T, script string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				io.WriteString(c, script)
				c.(*net.TCPConn).SetLinger(0)
			})
		}
	})
	return "http://" + ln.Addr().String()
}

// chunk frames s as one HTTP/1.1 chunk.
func chunk(s string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(s), s) }

const sseHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX-Engine: raw\r\nTransfer-Encoding: chunked\r\n\r\n"

// TestRetryOnNoAnswer: a connection that breaks before any byte of the
// answer sends the request to another worker, once, unless --retry-reset
// is off.
func TestRetryOnNoAnswer(t *testing.T) {
	for _, retry := range []bool{true, false} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("retry=%v/stream=%v", retry, stream), func(t *testing.T) {
				h := newHarness(t)
				live := newEngine(t, testModel)
				reset := specURL(t, rawEngine(t, ""))
				g := h.service(func(o *Options) {
					o.Workers = []direct.WorkerSpec{spec(t, live, ""), reset}
					o.RetryReset = retry
				})
				waitWorkers(t, g, 2)
				g.Router.Load().Start("busy", rankOf(live), 1e5, 0) // the resetting worker is cheaper
				extra := ""
				if stream {
					extra = `,"stream":true`
				}
				status, hdr, body := post(t, g.url(), "/v1/completions", completionBody(prompt(1, 2), extra))
				if retry && (status != http.StatusOK || hdr.Get(headerWorker) != live.hostPort()) {
					t.Fatalf("status %d worker %q: %s", status, hdr.Get(headerWorker), body)
				}
				if !retry && (status != http.StatusBadGateway || !strings.Contains(string(body), "no answer")) {
					t.Fatalf("status %d: %s", status, body)
				}
				if n := metricValue(t, g, `kvrouter_upstream_failures_total{kind="no_answer"}`); n != 1 {
					t.Fatalf("%v no-answer failures counted", n)
				}
				wantRetries := 0.0
				if retry {
					wantRetries = 1
				}
				if n := metricValue(t, g, "kvrouter_retries_total"); n != wantRetries {
					t.Fatalf("%v retries, want %v", n, wantRetries)
				}
			})
		}
	}
}

// streamError is an error event's payload.
type streamError struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    int    `json:"code"`
	} `json:"error"`
}

// TestStreamBreaksOff: an answer that breaks off never reaches the client
// as half an event, nor as a success: a stream under way ends with an
// error event and no [DONE], one not yet under way fails with a 502.
func TestStreamBreaksOff(t *testing.T) {
	const first = "data: {\"choices\":[{\"index\":0,\"text\":\"a\"}]}\n\n"
	tests := []struct {
		name, script string
		stream       bool
		// want is what the client gets before the error event, with
		// status 200; empty wants a 502 JSON error.
		want string
	}{
		{"mid-JSON after an event", sseHead + chunk(first) + chunk("data: {\"choi"), true, first},
		{"at an event's end", sseHead + chunk(first), true, first},
		{"within an event, cleanly ended", sseHead + chunk(first) + chunk("data: {\"choi") + "0\r\n\r\n", true, first},
		{"before any event", sseHead + chunk("data: {\"cho"), true, ""},
		{"a non-streamed answer", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"id\":", false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			g := h.service(func(o *Options) { o.Workers = []direct.WorkerSpec{specURL(t, rawEngine(t, tc.script))} })
			waitWorkers(t, g, 1)
			extra := ""
			if tc.stream {
				extra = `,"stream":true`
			}
			status, hdr, body := post(t, g.url(), "/v1/completions", completionBody(prompt(1, 2), extra))
			if tc.want == "" {
				var e streamError
				// The failed answer's head is not the error's.
				if status != http.StatusBadGateway || hdr.Get("X-Engine") != "" || json.Unmarshal(body, &e) != nil ||
					!strings.Contains(e.Error.Message, "broke off") {
					t.Fatalf("status %d: %s", status, body)
				}
				if n := metricValue(t, g, "kvrouter_stream_errors_total"); n != 0 {
					t.Fatalf("%v stream errors counted for a 502", n)
				}
			} else {
				rest, ok := bytes.CutPrefix(body, []byte(tc.want))
				data, ok2 := bytes.CutPrefix(rest, []byte("data: "))
				data, ok3 := bytes.CutSuffix(data, []byte("\n\n"))
				var e streamError
				if status != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "text/event-stream") || !ok || !ok2 || !ok3 ||
					bytes.Contains(data, []byte("\n")) || json.Unmarshal(data, &e) != nil ||
					e.Error.Type != "upstream_error" || e.Error.Code != http.StatusBadGateway || !strings.Contains(e.Error.Message, "broke off") {
					t.Fatalf("status %d, stream %q", status, body)
				}
				if n := metricValue(t, g, "kvrouter_stream_errors_total"); n != 1 {
					t.Fatalf("%v stream errors counted", n)
				}
			}
			if n := metricValue(t, g, `kvrouter_upstream_failures_total{kind="broke_off"}`); n != 1 {
				t.Fatalf("%v broken answers counted", n)
			}
			if n := metricValue(t, g, `kvrouter_requests_total{outcome="upstream_error"}`); n != 1 {
				t.Fatalf("%v upstream errors counted", n)
			}
		})
	}
}
