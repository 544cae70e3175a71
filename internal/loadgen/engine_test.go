package loadgen

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// engine is an httptest server that streams completions the way vLLM
// does. Each test decides per request what it answers through handle.
type engine struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []captured // in order of arrival
}

type captured struct {
	id     string
	path   string
	header http.Header
	body   map[string]any
	prompt []uint32
}

func newEngine(t *testing.T, handle func(w *sseWriter, c captured)) *engine {
	t.Helper()
	e := &engine{}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		c := captured{id: r.Header.Get("X-Request-Id"), path: r.URL.Path, header: r.Header.Clone()}
		if err := json.Unmarshal(raw, &c.body); err != nil {
			t.Errorf("request %s: body is not JSON: %v", c.id, err)
		}
		var typed struct {
			Prompt []uint32 `json:"prompt"`
		}
		_ = json.Unmarshal(raw, &typed) // a text prompt leaves it nil
		c.prompt = typed.Prompt
		e.mu.Lock()
		e.got = append(e.got, c)
		e.mu.Unlock()
		handle(&sseWriter{w: w, r: r}, c)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *engine) requests() []captured {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]captured(nil), e.got...)
}

// sseWriter writes one server-sent event at a time and flushes it.
type sseWriter struct {
	w       http.ResponseWriter
	r       *http.Request
	started bool
}

func (s *sseWriter) event(payload string) {
	if !s.started {
		s.w.Header().Set("Content-Type", "text/event-stream")
		s.started = true
	}
	fmt.Fprintf(s.w, "data: %s\n\n", payload)
	s.w.(http.Flusher).Flush()
}

func (s *sseWriter) token(text string) {
	s.event(fmt.Sprintf(`{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":%q,"finish_reason":null}]}`, text))
}

func (s *sseWriter) usage(prompt, completion, local, peer int) {
	s.event(fmt.Sprintf(`{"id":"cmpl-1","object":"text_completion","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d},"kvrouter":{"local_cached_tokens":%d,"peer_restored_tokens":%d}}}`,
		prompt, completion, prompt+completion, local+peer, local, peer))
}

func (s *sseWriter) done() { s.event("[DONE]") }

// complete answers like an engine that found half the prompt cached.
func complete(w *sseWriter, c captured) {
	w.token("Hello")
	w.token(" world")
	w.usage(len(c.prompt), 2, len(c.prompt)/2, 0)
	w.done()
}

// virtualClock is a Clock whose time moves only when the driver waits
// (After jumps to the deadline) or the test advances it, so every
// timestamp a run records is known exactly.
type virtualClock struct {
	mu  sync.Mutex
	now time.Time
}

func newVirtualClock() *virtualClock { return &virtualClock{now: time.Unix(1_700_000_000, 0)} }

func (c *virtualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *virtualClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *virtualClock) After(d time.Duration) <-chan time.Time {
	c.advance(max(d, 0))
	ch := make(chan time.Time, 1)
	ch <- c.Now()
	return ch
}

// pacedTransport hands the driver each response one server-sent event per
// Read, and moves the clock on by a second before each event, so that the
// n-th event is read at exactly n seconds after the request went.
type pacedTransport struct{ clock *virtualClock }

func (p pacedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		resp.Body = &pacedBody{rc: resp.Body, br: bufio.NewReader(resp.Body), clock: p.clock}
	}
	return resp, err
}

type pacedBody struct {
	rc      io.ReadCloser
	br      *bufio.Reader
	clock   *virtualClock
	pending []byte
}

func (b *pacedBody) Read(p []byte) (int, error) {
	if len(b.pending) == 0 {
		for {
			line, err := b.br.ReadBytes('\n')
			b.pending = append(b.pending, line...)
			if err != nil {
				if len(b.pending) == 0 {
					return 0, err
				}
				break
			}
			if len(line) == 1 && len(b.pending) > 1 {
				break // the blank line ending an event
			}
		}
		b.clock.advance(time.Second)
	}
	n := copy(p, b.pending)
	b.pending = b.pending[n:]
	return n, nil
}

func (b *pacedBody) Close() error { return b.rc.Close() }
