package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"kvrouter/internal/workload"
)

// safety turns a hang (a driver that serialises what must overlap) into a
// failure instead of a stuck test binary; no test waits for it to expire.
const safety = 30 * time.Second

func run(t *testing.T, d *Driver, reqs []workload.Request, progress func(done, total int)) Results {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), safety)
	defer cancel()
	res, err := d.Run(ctx, reqs, progress)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

func TestDriverSendsCompletions(t *testing.T) {
	e := newEngine(t, complete)
	reqs := []workload.Request{
		{ID: "tokens", Prompt: []uint32{1000, 29999, 7}, MaxTokens: 16},
		{ID: "salted", Prompt: []uint32{5}, MaxTokens: 1, CacheSalt: "tenant \"a\"", Arrival: time.Millisecond},
		{ID: "text", Text: "héllo\n", MaxTokens: 2, Arrival: 2 * time.Millisecond},
	}
	for _, ignoreEOS := range []bool{false, true} {
		e.mu.Lock()
		e.got = nil
		e.mu.Unlock()
		d := &Driver{BaseURL: e.srv.URL + "/", Model: "m/7b", IgnoreEOS: ignoreEOS, Clock: newVirtualClock()}
		res := run(t, d, reqs, nil)
		got := e.requests()
		if len(got) != len(reqs) || len(res.Records) != len(reqs) {
			t.Fatalf("server saw %d requests, driver recorded %d, want %d", len(got), len(res.Records), len(reqs))
		}
		// They overlap, so the server may see them in any order.
		for _, c := range got {
			i := slices.IndexFunc(reqs, func(r workload.Request) bool { return r.ID == c.id })
			if i < 0 {
				t.Fatalf("unknown request id %q", c.id)
			}
			r := reqs[i]
			want := map[string]any{
				"model": "m/7b", "max_tokens": float64(r.MaxTokens), "stream": true,
				"stream_options": map[string]any{"include_usage": true},
			}
			if r.Prompt != nil {
				var p []any
				for _, tok := range r.Prompt {
					p = append(p, float64(tok))
				}
				want["prompt"] = p
			} else {
				want["prompt"] = r.Text
			}
			if r.CacheSalt != "" {
				want["cache_salt"] = r.CacheSalt
			}
			if ignoreEOS {
				want["ignore_eos"] = true
			}
			if c.id != r.ID || c.path != "/v1/completions" || !reflect.DeepEqual(c.body, want) {
				t.Errorf("request %s: path %q body %v\nwant body %v", c.id, c.path, c.body, want)
			}
			if ct := c.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("request %s: Content-Type %q", c.id, ct)
			}
		}
		for i, rec := range res.Records {
			if rec.ID != reqs[i].ID || rec.Err != nil || rec.Status != 200 || rec.Usage.CompletionTokens != 2 ||
				rec.Usage.PromptTokens != len(reqs[i].Prompt) || !rec.Usage.Extension {
				t.Errorf("record %d: %+v", i, rec)
			}
		}
	}
}

// TTFT is taken when the first chunk with generated text is read: not at
// the response headers, not at a chunk without text, not at the end. The
// paced transport delivers event n at n seconds, so the second tells which
// event the driver timed.
func TestDriverTTFTAtFirstToken(t *testing.T) {
	tests := []struct {
		name      string
		events    []string
		ttft, e2e time.Duration
	}{
		{"text in the first chunk", []string{`{"choices":[{"text":"a"}]}`, `{"choices":[{"text":"b"}]}`, usageChunk, "[DONE]"}, 1 * time.Second, 4 * time.Second},
		{"an empty first chunk", []string{`{"choices":[{"text":""}]}`, `{"choices":[{"text":"a"}]}`, usageChunk, "[DONE]"}, 2 * time.Second, 4 * time.Second},
		{"usage, then text", []string{`{"choices":[],"usage":null}`, `{"choices":[{"text":""}]}`, `{"choices":[{"text":"a"}]}`, `{"choices":[{"text":"b"}]}`, usageChunk, "[DONE]"}, 3 * time.Second, 6 * time.Second},
		{"no text at all: TTFT is the end", []string{`{"choices":[{"text":""}]}`, usageChunk, "[DONE]"}, 3 * time.Second, 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngine(t, func(w *sseWriter, c captured) {
				for _, ev := range tt.events {
					w.event(ev)
				}
			})
			clock := newVirtualClock()
			d := &Driver{BaseURL: e.srv.URL, Model: "m", Clock: clock, Client: &http.Client{Transport: pacedTransport{clock}}}
			res := run(t, d, []workload.Request{{ID: "r", Prompt: []uint32{1}, MaxTokens: 2}}, nil)
			rec := res.Records[0]
			if rec.Err != nil || rec.TTFT != tt.ttft || rec.E2E != tt.e2e {
				t.Fatalf("TTFT at event %v, end at event %v (err %v); want events %v and %v", rec.TTFT.Seconds(), rec.E2E.Seconds(), rec.Err, tt.ttft.Seconds(), tt.e2e.Seconds())
			}
			if res.Wall != tt.e2e {
				t.Fatalf("wall %v, want %v", res.Wall, tt.e2e)
			}
		})
	}
}

const usageChunk = `{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}`

// Failures are counted per request and never stop the run.
func TestDriverCountsErrors(t *testing.T) {
	behaviours := map[string]struct {
		answer func(w *sseWriter, c captured)
		want   error
	}{
		"ok":            {complete, nil},
		"500":           {func(w *sseWriter, c captured) { http.Error(w.w, "engine on fire", 500) }, ErrStatus},
		"429":           {func(w *sseWriter, c captured) { http.Error(w.w, "slow down", 429) }, ErrStatus},
		"error chunk":   {func(w *sseWriter, c captured) { w.token("a"); w.event(`{"error":{"message":"oom","code":500}}`) }, ErrStream},
		"no [DONE]":     {func(w *sseWriter, c captured) { w.token("a"); w.usage(1, 1, 0, 0) }, ErrStream},
		"no usage":      {func(w *sseWriter, c captured) { w.token("a"); w.done() }, ErrNoUsage},
		"garbage chunk": {func(w *sseWriter, c captured) { w.event("{nope") }, ErrStream},
		"hang up": {func(w *sseWriter, c captured) {
			w.token("a")
			conn, _, err := w.w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		}, nil}, // a transport error, not one of ours: checked below
	}
	e := newEngine(t, func(w *sseWriter, c captured) { behaviours[strings.TrimSuffix(c.id, "#2")].answer(w, c) })
	var reqs []workload.Request
	for _, id := range slices.Sorted(mapsKeys(behaviours)) {
		reqs = append(reqs, workload.Request{ID: id, Prompt: []uint32{1, 2}, MaxTokens: 2})
		// A second turn goes even though the first failed.
		reqs = append(reqs, workload.Request{ID: id + "#2", Session: id, Turn: 1, Prompt: []uint32{1, 2, 3}, MaxTokens: 2})
		reqs[len(reqs)-2].Session = id
	}
	res := run(t, &Driver{BaseURL: e.srv.URL, Model: "m", Clock: newVirtualClock()}, reqs, nil)
	if len(res.Records) != len(reqs) || len(e.requests()) != len(reqs) {
		t.Fatalf("recorded %d, server saw %d, want %d", len(res.Records), len(e.requests()), len(reqs))
	}
	for _, rec := range res.Records {
		b := behaviours[strings.TrimSuffix(rec.ID, "#2")]
		switch {
		case strings.HasPrefix(rec.ID, "hang up"):
			if rec.Err == nil {
				t.Errorf("%s: no error for a connection closed mid-stream", rec.ID)
			}
		case !errors.Is(rec.Err, b.want) || (b.want == nil) != (rec.Err == nil):
			t.Errorf("%s: error %v, want %v", rec.ID, rec.Err, b.want)
		}
	}
	if rec := res.Records[slices.IndexFunc(res.Records, func(r Record) bool { return r.ID == "500" })]; rec.Status != 500 || !strings.Contains(rec.Err.Error(), "engine on fire") {
		t.Errorf("a 500 is recorded as status %d, %v", rec.Status, rec.Err)
	}
	s := res.Summary()
	if s.Requests != len(reqs) || s.Errors != len(reqs)-2 || len(s.TTFT) != 2 {
		t.Fatalf("summary counts %d requests, %d errors, %d TTFT samples; want %d, %d, 2", s.Requests, s.Errors, len(s.TTFT), len(reqs), len(reqs)-2)
	}
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// A session's turn goes only after the previous turn completed, while
// different sessions overlap: every session's first turn is held by the
// server until all first turns arrived, which a driver serialising sessions
// would never deliver.
func TestDriverSessionOrder(t *testing.T) {
	const sessions, turns = 4, 3
	var (
		mu        sync.Mutex
		completed = map[string]bool{}
		violation []string
		firsts    sync.WaitGroup
	)
	firsts.Add(sessions)
	e := newEngine(t, func(w *sseWriter, c captured) {
		var s, turn int
		fmt.Sscanf(c.id, "s%d-t%d", &s, &turn)
		mu.Lock()
		if turn > 0 && !completed[fmt.Sprintf("s%d-t%d", s, turn-1)] {
			violation = append(violation, c.id)
		}
		mu.Unlock()
		if turn == 0 {
			firsts.Done()
			firsts.Wait()
		}
		w.token("x")
		w.usage(len(c.prompt), 1, 0, 0)
		// Completed before the client can see [DONE].
		mu.Lock()
		completed[c.id] = true
		mu.Unlock()
		w.done()
	})
	var reqs []workload.Request
	for turn := range turns {
		for s := range sessions {
			// Later turns are due before earlier ones of other sessions,
			// and a turn is due with (not after) its predecessor: only
			// completion may order them.
			reqs = append(reqs, workload.Request{ID: fmt.Sprintf("s%d-t%d", s, turn), Session: fmt.Sprint(s), Turn: turn, Prompt: []uint32{1}, MaxTokens: 1})
		}
	}
	slices.Reverse(reqs)
	var progress []int
	res := run(t, &Driver{BaseURL: e.srv.URL, Model: "m", Clock: newVirtualClock()}, reqs, func(done, total int) {
		if total != len(reqs) {
			t.Errorf("progress total %d", total)
		}
		progress = append(progress, done)
	})
	if len(violation) > 0 {
		t.Fatalf("sent before the previous turn completed: %v", violation)
	}
	if len(res.Records) != len(reqs) || len(e.requests()) != len(reqs) {
		t.Fatalf("%d records, %d requests seen, want %d", len(res.Records), len(e.requests()), len(reqs))
	}
	for i, rec := range res.Records {
		if rec.ID != reqs[i].ID || rec.Err != nil {
			t.Fatalf("record %d: %s %v, want %s in workload order", i, rec.ID, rec.Err, reqs[i].ID)
		}
	}
	if want := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}; !slices.Equal(progress, want) {
		t.Fatalf("progress %v", progress)
	}
}

// Open loop: a request goes at its arrival offset, not before, whatever
// else is in flight; the virtual clock makes "at" exact.
func TestDriverOpenLoopArrivals(t *testing.T) {
	e := newEngine(t, complete)
	var reqs []workload.Request
	for i, ms := range []int{0, 0, 5, 120, 121, 3000} {
		reqs = append(reqs, workload.Request{ID: fmt.Sprint(i), Arrival: time.Duration(ms) * time.Millisecond, Prompt: []uint32{1}, MaxTokens: 1})
	}
	res := run(t, &Driver{BaseURL: e.srv.URL, Model: "m", Clock: newVirtualClock()}, reqs, nil)
	for i, rec := range res.Records {
		if rec.Sent != reqs[i].Arrival || rec.Due != reqs[i].Arrival {
			t.Errorf("%s: due %v, sent %v, want %v", rec.ID, rec.Due, rec.Sent, reqs[i].Arrival)
		}
	}
	if res.Wall != 3*time.Second {
		t.Errorf("wall %v, want 3s (the last arrival, served in no virtual time)", res.Wall)
	}
}

// The concurrency cap holds in both loops; closed loop ignores arrivals
// and keeps workload order.
func TestDriverConcurrency(t *testing.T) {
	for _, closed := range []bool{false, true} {
		t.Run(fmt.Sprintf("closed=%v", closed), func(t *testing.T) {
			const limit = 3
			var (
				mu             sync.Mutex
				inFlight, most int
				order          []string
				firstFew       sync.WaitGroup
			)
			firstFew.Add(limit)
			e := newEngine(t, func(w *sseWriter, c captured) {
				mu.Lock()
				inFlight++
				most = max(most, inFlight)
				order = append(order, c.id)
				first := len(order) <= limit
				mu.Unlock()
				if first {
					// The cap is reached, not merely respected.
					firstFew.Done()
					firstFew.Wait()
				}
				w.token("x")
				w.usage(1, 1, 0, 0)
				mu.Lock()
				inFlight--
				mu.Unlock()
				w.done()
			})
			var reqs []workload.Request
			for i := range 12 {
				// Hours apart: a closed loop that waited would never end,
				// and an open loop jumps the virtual clock.
				reqs = append(reqs, workload.Request{ID: fmt.Sprint(i), Arrival: time.Duration(i) * time.Hour, Prompt: []uint32{1}, MaxTokens: 1})
			}
			clock := &strictClock{virtualClock: newVirtualClock(), t: t, forbidWaits: closed}
			res := run(t, &Driver{BaseURL: e.srv.URL, Model: "m", Concurrency: limit, ClosedLoop: closed, Clock: clock}, reqs, nil)
			if most > limit || len(res.Records) != len(reqs) {
				t.Fatalf("%d in flight at most (cap %d), %d records", most, limit, len(res.Records))
			}
			if closed {
				for _, rec := range res.Records {
					if rec.Sent != 0 {
						t.Fatalf("%s sent at %v in a closed loop", rec.ID, rec.Sent)
					}
				}
			}
		})
	}
	t.Run("closed loop, one slot, in workload order", func(t *testing.T) {
		e := newEngine(t, complete)
		var reqs []workload.Request
		for i := range 8 {
			reqs = append(reqs, workload.Request{ID: fmt.Sprint(i), Arrival: time.Duration(8-i) * time.Hour, Prompt: []uint32{1}, MaxTokens: 1})
		}
		clock := &strictClock{virtualClock: newVirtualClock(), t: t, forbidWaits: true}
		run(t, &Driver{BaseURL: e.srv.URL, Model: "m", Concurrency: 1, ClosedLoop: true, Clock: clock}, reqs, nil)
		var got []string
		for _, c := range e.requests() {
			got = append(got, c.id)
		}
		// Arrival order (the reverse of the slice), arrival being only
		// an order in a closed loop.
		if want := []string{"7", "6", "5", "4", "3", "2", "1", "0"}; !slices.Equal(got, want) {
			t.Fatalf("order %v, want %v", got, want)
		}
	})
}

// strictClock fails the test if the driver waits when it must not.
type strictClock struct {
	*virtualClock
	t           *testing.T
	forbidWaits bool
}

func (c *strictClock) After(d time.Duration) <-chan time.Time {
	if c.forbidWaits {
		c.t.Errorf("waited %v in a closed loop", d)
	}
	return c.virtualClock.After(d)
}

// Cancelling stops the run: requests in flight are abandoned, requests not
// yet due are never sent, and Run returns the context's error.
func TestDriverCancel(t *testing.T) {
	arrived := make(chan string, 10)
	e := newEngine(t, func(w *sseWriter, c captured) {
		arrived <- c.id
		w.token("x")
		<-w.r.Context().Done() // never finishes on its own
	})
	reqs := []workload.Request{
		{ID: "running", Prompt: []uint32{1}, MaxTokens: 1},
		{ID: "later", Arrival: time.Hour, Prompt: []uint32{1}, MaxTokens: 1},
		{ID: "next turn", Session: "s", Turn: 1, Prompt: []uint32{1}, MaxTokens: 1},
		{ID: "first turn", Session: "s", Prompt: []uint32{1}, MaxTokens: 1},
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived
		<-arrived
		cancel()
	}()
	res, err := (&Driver{BaseURL: e.srv.URL, Model: "m"}).Run(ctx, reqs, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}
	var ids []string
	for _, rec := range res.Records {
		ids = append(ids, rec.ID)
		if rec.Err == nil {
			t.Errorf("%s: abandoned but recorded without error", rec.ID)
		}
	}
	if want := []string{"running", "first turn"}; !slices.Equal(ids, want) {
		t.Fatalf("recorded %v, want %v", ids, want)
	}
	if len(e.requests()) != 2 {
		t.Fatalf("server saw %d requests after the cancel, want 2", len(e.requests()))
	}
}

func TestDriverCancelWhileWaiting(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e := newEngine(t, complete)
	res, err := (&Driver{BaseURL: e.srv.URL, Model: "m"}).Run(ctx, []workload.Request{{ID: "a", Arrival: time.Hour, MaxTokens: 1}}, nil)
	if !errors.Is(err, context.Canceled) || len(res.Records) != 0 {
		t.Fatalf("got %v and %d records", err, len(res.Records))
	}
}

func TestDriverConfigErrors(t *testing.T) {
	tests := []struct {
		d     Driver
		field string
	}{
		{Driver{Model: "m"}, "Driver.BaseURL"},
		{Driver{BaseURL: "localhost:8000", Model: "m"}, "Driver.BaseURL"},
		{Driver{BaseURL: "http://%zz", Model: "m"}, "Driver.BaseURL"},
		{Driver{BaseURL: "http://h"}, "Driver.Model"},
		{Driver{BaseURL: "http://h", Model: "m", Concurrency: -1}, "Driver.Concurrency"},
		{Driver{BaseURL: "http://h", Model: "m", ClosedLoop: true}, "Driver.ClosedLoop"},
	}
	for _, tt := range tests {
		_, err := tt.d.Run(context.Background(), nil, nil)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("%+v: %v, want ErrConfig naming %s", tt.d, err, tt.field)
		}
	}
}

// A refused connection is a per-request error, not the end of the run.
func TestDriverUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	reqs := []workload.Request{{ID: "a", MaxTokens: 1}, {ID: "b", MaxTokens: 1}}
	res := run(t, &Driver{BaseURL: "http://" + addr, Model: "m", Clock: newVirtualClock()}, reqs, nil)
	if s := res.Summary(); s.Requests != 2 || s.Errors != 2 || res.Records[0].Status != 0 {
		t.Fatalf("%+v", res.Records)
	}
}
