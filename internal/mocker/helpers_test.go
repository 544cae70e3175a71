package mocker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// freePorts returns the first of n consecutive TCP ports that are free on
// every interface right now.
func freePorts(t testing.TB, n int) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		base := l.Addr().(*net.TCPAddr).Port
		ls := []net.Listener{l}
		ok := base+n <= 65535
		for p := base + 1; ok && p < base+n; p++ {
			l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
			if err != nil {
				ok = false
				break
			}
			ls = append(ls, l)
		}
		for _, l := range ls {
			l.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatalf("no %d consecutive free ports", n)
	return 0
}

// testConfig is a small, fast engine on free loopback ports.
func testConfig(t testing.TB, mut func(*Config)) Config {
	c := Config{
		Listen:    "127.0.0.1:0",
		BlockSize: 64,
		Speedup:   1000,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if mut != nil {
		mut(&c)
	}
	// One range for all of the engine's ports, so that two probes cannot
	// hand out the same free port.
	dp, tp := max(c.DP, 1), max(c.TP, 1)
	if c.ControlPort != 0 {
		return c
	}
	base := freePorts(t, dp*tp+2*dp)
	c.ControlPort = base
	if c.EventsEndpoint == "" {
		c.EventsEndpoint = "tcp://*:" + strconv.Itoa(base+dp*tp)
	}
	if c.ReplayEndpoint == "" {
		c.ReplayEndpoint = "tcp://*:" + strconv.Itoa(base+dp*tp+dp)
	}
	return c
}

func startEngine(t testing.TB, mut func(*Config)) *Engine {
	t.Helper()
	e, err := Start(testConfig(t, mut))
	// Free ports are found by probing, and other packages' tests start
	// processes and connections meanwhile: a port taken between the probe
	// and the bind is retried on fresh ports.
	for try := 0; err != nil && errors.Is(err, syscall.EADDRINUSE) && try < 5; try++ {
		e, err = Start(testConfig(t, mut))
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// postAsync posts a completion request in the background; the channel
// gets the answer (zero when the request failed).
func postAsync(t testing.TB, e *Engine, body map[string]any) <-chan completion {
	done := make(chan completion, 1)
	r := jsonBody(t, body)
	go func() {
		var out completion
		if resp, err := http.Post(e.URL()+pathCompletions, contentJSON, r); err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&out)
			resp.Body.Close()
		}
		done <- out
	}()
	return done
}

// completion is the part of a completions or chat answer tests look at.
type completion struct {
	Choices []struct {
		Text    string `json:"text"`
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage usage `json:"usage"`
}

func (c completion) text() string {
	if len(c.Choices) == 0 {
		return ""
	}
	return c.Choices[0].Text + c.Choices[0].Message.Content
}

func post(t testing.TB, url string, body any, out any) int {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(url, contentJSON, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("POST %s: %v in %s", url, err, data)
		}
	}
	return resp.StatusCode
}

func complete(t testing.TB, e *Engine, body map[string]any) completion {
	t.Helper()
	var c completion
	if code := post(t, e.URL()+pathCompletions, body, &c); code != http.StatusOK {
		t.Fatalf("completion: status %d", code)
	}
	return c
}

func tokenize(t testing.TB, e *Engine, prompt string) []uint32 {
	t.Helper()
	var r tokenizeResponse
	if code := post(t, e.URL()+pathTokenize, map[string]any{"prompt": prompt}, &r); code != http.StatusOK {
		t.Fatalf("tokenize: status %d", code)
	}
	if r.Count != len(r.Tokens) {
		t.Fatalf("tokenize: count %d for %d tokens", r.Count, len(r.Tokens))
	}
	return r.Tokens
}

// longPrompt returns a text of at least n tokens for e's tokenizer; salt
// makes prompts of different tests differ from the first token.
func longPrompt(t testing.TB, e *Engine, salt string, n int) string {
	t.Helper()
	var b strings.Builder
	for i := 0; ; i++ {
		fmt.Fprintf(&b, "%s sentence %d is about the cache of block %d and its router. ", salt, i, i*7%13)
		if i%20 == 19 && len(e.tok.Encode(b.String(), true)) >= n {
			return b.String()
		}
	}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func itoa(n int) string { return strconv.Itoa(n) }

// metricsText returns the engine's /metrics text.
func metricsText(t testing.TB, e *Engine) string {
	t.Helper()
	resp, err := http.Get(e.URL() + pathMetrics)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// assertMetric checks that /metrics has the exact sample line.
func assertMetric(t testing.TB, e *Engine, line string) {
	t.Helper()
	body := metricsText(t, e)
	for _, l := range strings.Split(body, "\n") {
		if l == line {
			return
		}
	}
	t.Fatalf("metrics lack %q:\n%s", line, body)
}

func jsonBody(t testing.TB, v any) io.Reader {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(b)
}

func doJSON(t testing.TB, req *http.Request, out any) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: status %d", req.Method, req.URL, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}
