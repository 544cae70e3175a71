// This file holds Driver: a workload sent as streaming /v1/completions requests, each timed.

package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"kvrouter/internal/workload"
)

// ErrConfig marks a Driver that cannot run.
var ErrConfig = errors.New("invalid driver configuration")

// Driver sends a workload as streaming POST /v1/completions requests.
type Driver struct {
	// BaseURL is the server's root, e.g. http://127.0.0.1:8000.
	BaseURL string
	Model   string
	// Client sends the requests; nil means one without a timeout (streams
	// last as long as generation does) that keeps a connection per slot.
	Client *http.Client
	// Concurrency caps requests in flight; 0 means no cap. Requests due
	// while the cap is reached wait, and their wait is not part of TTFT.
	Concurrency int
	// ClosedLoop ignores arrival offsets: each request goes as soon as a
	// slot is free (Concurrency is then required) and its session's
	// previous turn completed, in arrival order.
	ClosedLoop bool
	// IgnoreEOS asks the engine to generate exactly max_tokens, as trace
	// replays want.
	IgnoreEOS bool
	// Clock times the run; nil means SystemClock.
	Clock Clock
}

// outcome is one finished request, sent back to the dispatcher.
type outcome struct {
	i   int
	rec Record
	end time.Time
}

// Run sends reqs, each at its arrival offset from the start of the run
// (open loop) and never before the previous turn of its session completed,
// and records every request it sent. One request failing does not stop the
// run: its Record carries the error. Cancelling ctx stops sending,
// abandons requests in flight (recorded with the context's error), and
// Run returns what it has with ctx.Err().
//
// progress, when not nil, is called after each completion with the count
// done, from one goroutine at a time.
func (d *Driver) Run(ctx context.Context, reqs []workload.Request, progress func(done, total int)) (Results, error) {
	endpoint, err := d.check()
	if err != nil {
		return Results{}, err
	}
	clock := d.Clock
	if clock == nil {
		clock = SystemClock{}
	}
	client := d.Client
	if client == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = max(d.Concurrency, 256)
		client = &http.Client{Transport: t}
		defer t.CloseIdleConnections()
	}
	limit := d.Concurrency
	if limit == 0 {
		limit = len(reqs)
	}
	var (
		p        = newPlan(reqs)
		start    = clock.Now()
		last     = start
		finished = make(chan outcome, len(reqs))
		records  = make([]Record, len(reqs))
		sent     = make([]bool, len(reqs))
		inFlight int
		done     int
		stop     = ctx.Done()
	)
	for done < len(reqs) {
		var wake <-chan time.Time
		for ctx.Err() == nil && inFlight < limit {
			i, due, ok := p.next()
			if !ok {
				break
			}
			if wait := due - clock.Now().Sub(start); !d.ClosedLoop && wait > 0 {
				wake = clock.After(wait)
				break
			}
			p.take()
			sent[i] = true
			inFlight++
			// Timed here rather than in the goroutine: the request is
			// released now, and encoding it is part of what a client waits.
			sentAt := clock.Now()
			go func() {
				rec, end := d.send(ctx, client, endpoint, reqs[i], clock, sentAt)
				rec.Sent = sentAt.Sub(start)
				finished <- outcome{i: i, rec: rec, end: end}
			}()
		}
		if inFlight == 0 && ctx.Err() != nil {
			break
		}
		select {
		case o := <-finished:
			inFlight--
			done++
			records[o.i] = o.rec
			if o.end.After(last) {
				last = o.end
			}
			p.complete(o.i)
			if progress != nil {
				progress(done, len(reqs))
			}
		case <-wake:
		case <-stop:
			// Dispatch no more; the loop drains the requests in flight,
			// which the context cancels.
			stop = nil
		}
	}
	res := Results{Wall: last.Sub(start)}
	for i, ok := range sent {
		if ok {
			res.Records = append(res.Records, records[i])
		}
	}
	return res, ctx.Err()
}

func (d *Driver) check() (string, error) {
	u, err := url.Parse(d.BaseURL)
	switch {
	case d.BaseURL == "":
		return "", fmt.Errorf("%w: Driver.BaseURL is empty", ErrConfig)
	case err != nil:
		return "", fmt.Errorf("%w: Driver.BaseURL: %v", ErrConfig, err)
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return "", fmt.Errorf("%w: Driver.BaseURL %q: want http(s)://host[:port]", ErrConfig, d.BaseURL)
	case d.Model == "":
		return "", fmt.Errorf("%w: Driver.Model is empty", ErrConfig)
	case d.Concurrency < 0:
		return "", fmt.Errorf("%w: Driver.Concurrency %d is negative", ErrConfig, d.Concurrency)
	case d.ClosedLoop && d.Concurrency == 0:
		return "", fmt.Errorf("%w: Driver.ClosedLoop needs Driver.Concurrency > 0", ErrConfig)
	}
	return strings.TrimSuffix(d.BaseURL, "/") + "/v1/completions", nil
}

// send performs one request released at sentAt and returns its record and
// when it ended.
func (d *Driver) send(ctx context.Context, client *http.Client, endpoint string, r workload.Request, clock Clock, sentAt time.Time) (Record, time.Time) {
	rec := Record{ID: r.ID, Session: r.Session, Turn: r.Turn, Due: r.Arrival, Warmup: r.Warmup}
	end := func(err error) (Record, time.Time) {
		now := clock.Now()
		rec.E2E = now.Sub(sentAt)
		rec.Err = err
		return rec, now
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(d.body(r)))
	if err != nil {
		return end(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("X-Request-Id", r.ID)
	resp, err := client.Do(req)
	if err != nil {
		return end(err)
	}
	defer resp.Body.Close()
	rec.Status = resp.StatusCode
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return end(fmt.Errorf("%w %d: %s", ErrStatus, resp.StatusCode, bytes.TrimSpace(msg)))
	}
	sr := newStreamReader(resp.Body)
	var first time.Time
	for {
		ev, err := sr.next()
		if ev == eventToken && first.IsZero() {
			// A chunk without text (a role, a keep-alive) is not a token:
			// TTFT counts from sending to the first generated text.
			first = clock.Now()
		}
		if !first.IsZero() {
			rec.TTFT = first.Sub(sentAt)
		}
		if err != nil {
			return end(err)
		}
		if ev == eventDone {
			break
		}
	}
	rec, now := end(nil)
	// Let the connection be reused: the server closes the stream after
	// [DONE].
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	if sr.usage == nil {
		rec.Err = fmt.Errorf("%w: request %s", ErrNoUsage, r.ID)
		return rec, now
	}
	rec.Usage = *sr.usage
	if first.IsZero() {
		// No chunk carried text (every token decoded to ""): the first
		// token reached the client no later than the end.
		rec.TTFT = rec.E2E
	}
	return rec, now
}

// body encodes the request by hand: a prompt may hold 100k token ids,
// which encoding/json would reflect over one by one.
func (d *Driver) body(r workload.Request) []byte {
	b := make([]byte, 0, 128+len(r.Prompt)*6)
	b = append(b, `{"model":`...)
	b = appendJSONString(b, d.Model)
	b = append(b, `,"prompt":`...)
	if len(r.Prompt) > 0 {
		b = append(b, '[')
		for i, t := range r.Prompt {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, uint64(t), 10)
		}
		b = append(b, ']')
	} else {
		b = appendJSONString(b, r.Text)
	}
	b = append(b, `,"max_tokens":`...)
	b = strconv.AppendInt(b, int64(r.MaxTokens), 10)
	b = append(b, `,"stream":true,"stream_options":{"include_usage":true}`...)
	if r.CacheSalt != "" {
		b = append(b, `,"cache_salt":`...)
		b = appendJSONString(b, r.CacheSalt)
	}
	if d.IgnoreEOS {
		b = append(b, `,"ignore_eos":true`...)
	}
	return append(b, '}')
}

func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}
