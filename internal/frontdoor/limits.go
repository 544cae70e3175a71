// This file holds the front door's bounds: bodies read as they arrive under a deadline and a budget, prompts within the context, answers within the cap.

package frontdoor

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"kvrouter/internal/router"
)

// ContextLimits says how long a model's context is: the most prompt tokens
// any of its workers takes.
type ContextLimits interface {
	// MaxModelLen is the context of model in tokens, as its engines report
	// it (max_model_len); 0 when none has.
	MaxModelLen(model string) int
}

const (
	// DefaultBodyTimeout is how long a client has to send a request body
	// once its head is read (--body-timeout).
	DefaultBodyTimeout = 30 * time.Second
	// DefaultMaxBodyMemory bounds the bytes of request bodies held at once
	// (--max-body-memory): 16 bodies of the largest size.
	DefaultMaxBodyMemory = 16 * defaultMaxBody
	// presize is the most a body's buffer is sized ahead of its bytes on
	// the strength of its Content-Length: enough for the usual prompt in
	// one allocation, little for a client that announces 32 MiB and sends
	// nothing.
	presize = 64 << 10
)

// maxEvent bounds one server-sent event of a streamed answer: a token chunk
// is a few hundred bytes, one with the prompt's logprobs echoed a few
// megabytes (a variable for tests).
var maxEvent = 16 << 20

var (
	// ErrPromptTooLong marks a prompt longer than its model's context.
	ErrPromptTooLong = errors.New("prompt exceeds the model's context")

	errBodyBudget = errors.New("request bodies in flight exceed --max-body-memory")
	// errAnswerTooLarge and errEventTooLarge: a worker's answer, or one
	// event of its stream, exceeds what the router holds.
	errAnswerTooLarge = errors.New("the answer exceeds the router's cap")
	errEventTooLarge  = errors.New("an event exceeds the router's cap")
)

// Refusal reasons, the label of kvrouter_requests_refused_total.
const (
	refusedBodyTimeout = "body_timeout"
	refusedBodyBusy    = "body_busy"
	refusedBodyTooBig  = "body_too_large"
	refusedPromptLong  = "prompt_too_long"
)

// Kinds of kvrouter_upstream_oversize_total.
const (
	oversizeAnswer = "answer"
	oversizeEvent  = "event"
)

// readBody reads a request body over dst's memory: within the size limit,
// the body deadline and the budget of bodies in flight. held is what the
// body took of the budget, for releaseBody once the request is done with
// it (also on error).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, dst []byte) (body []byte, held int64, aerr *apiError) {
	limit := s.MaxBody
	if limit <= 0 {
		limit = defaultMaxBody
	}
	timeout := s.BodyTimeout
	if timeout <= 0 {
		timeout = DefaultBodyTimeout
	}
	// A client that announces a body and sends it slowly, or never, would
	// otherwise hold its connection and its buffer for good. The deadline
	// is lifted once the body is in: the server's read that watches for
	// the client going away must not trip on it while the answer streams.
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(timeout)) == nil {
		defer rc.SetReadDeadline(time.Time{})
	}
	take := func(n int64) bool {
		if !s.takeBody(n) {
			return false
		}
		held += n
		return true
	}
	body, err := readAll(dst, http.MaxBytesReader(w, r.Body, limit), r.ContentLength, limit, take)
	if err == nil {
		return body, held, nil
	}
	s.releaseBody(held)
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		s.refused(refusedBodyTooBig)
		return nil, 0, &apiError{http.StatusRequestEntityTooLarge, "invalid_request_error",
			fmt.Sprintf("request body exceeds %d bytes", limit), outcomeBadRequest}
	case errors.Is(err, errBodyBudget):
		s.refused(refusedBodyBusy)
		w.Header().Set("Retry-After", "1")
		return nil, 0, &apiError{http.StatusServiceUnavailable, "service_unavailable",
			"the router holds as many request bodies as it may (--max-body-memory); retry shortly", outcomeOverloaded}
	case errors.Is(err, os.ErrDeadlineExceeded):
		s.refused(refusedBodyTimeout)
		w.Header().Set("Connection", "close")
		return nil, 0, &apiError{http.StatusRequestTimeout, "invalid_request_error",
			fmt.Sprintf("the request body did not arrive within %v (--body-timeout)", timeout), outcomeBadRequest}
	}
	return nil, 0, &apiError{http.StatusBadRequest, "invalid_request_error", "reading the body: " + err.Error(), outcomeCanceled}
}

// takeBody reserves n bytes of the budget of bodies in flight.
func (s *Server) takeBody(n int64) bool {
	budget := s.MaxBodyMemory
	if budget <= 0 {
		budget = DefaultMaxBodyMemory
	}
	if s.bodyBytes.Add(n) > budget {
		s.bodyBytes.Add(-n)
		return false
	}
	return true
}

// releaseBody gives back what readBody took of the budget.
func (s *Server) releaseBody(held int64) {
	if held != 0 {
		s.bodyBytes.Add(-held)
	}
}

// BodyBytes is the memory request bodies hold now, within --max-body-memory.
func (s *Server) BodyBytes() int64 { return s.bodyBytes.Load() }

// readAll is io.ReadAll over dst's memory, growing the buffer as bytes
// arrive, never ahead of them by more than presize: a client cannot make
// the router reserve the Content-Length it announces. Growth doubles, up
// to the announced length when there is one (room for the read that sees
// EOF included), so a prompt is copied a few times at most. take, when
// set, is asked for every byte of capacity before it is allocated,
// dst's own included; when it refuses, readAll stops with errBodyBudget.
func readAll(dst []byte, rd io.Reader, length, limit int64, take func(int64) bool) ([]byte, error) {
	buf := dst[:0]
	if take != nil && cap(buf) > 0 && !take(int64(cap(buf))) {
		return nil, errBodyBudget
	}
	announced := length > 0 && length <= limit
	for {
		if len(buf) == cap(buf) {
			n := max(2*cap(buf), 512)
			switch {
			case cap(buf) == 0 && announced:
				n = int(min(length+1, presize))
			case announced && int64(len(buf)) <= length:
				n = int(min(int64(n), length+1))
			}
			if take != nil && !take(int64(n-cap(buf))) {
				return buf, errBodyBudget
			}
			grown := make([]byte, len(buf), n)
			copy(grown, buf)
			buf = grown
		}
		m, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// checkContext refuses a prompt of n tokens longer than the model's
// context, a limit of 0 being unknown.
func checkContext(model string, n, limit int) error {
	if limit > 0 && n > limit {
		return fmt.Errorf("%w: %w: the prompt is %d tokens, more than model %q's context of %d tokens (max_model_len)",
			ErrBadRequest, ErrPromptTooLong, n, model, limit)
	}
	return nil
}

// checkContextBytes refuses, before encoding it, a text that cannot fit
// the context whatever it encodes to: a token stands for at most
// bytesPerToken bytes of it (0: no bound is known).
func checkContextBytes(model string, text string, limit, bytesPerToken int) error {
	if limit > 0 && bytesPerToken > 0 && int64(len(text)) > int64(limit)*int64(bytesPerToken) {
		return fmt.Errorf("%w: %w: the prompt is %d bytes, more than model %q's context of %d tokens (max_model_len) can hold at %d bytes a token at most",
			ErrBadRequest, ErrPromptTooLong, len(text), model, limit, bytesPerToken)
	}
	return nil
}

// contextOf is the context of model in tokens, 0 when unknown.
func (s *Server) contextOf(model string) int {
	if s.Context == nil {
		return 0
	}
	return s.Context.MaxModelLen(model)
}

func (s *Server) refused(reason string) {
	if s.Metrics != nil {
		s.Metrics.refused.WithLabelValues(reason).Inc()
	}
}

// tooLarge ends an attempt whose answer exceeded a cap: with a 502 when
// nothing reached the client, with an error event when part of a stream
// did. Another worker would answer the same, so it is not retried.
func (s *Server) tooLarge(w http.ResponseWriter, wk router.Worker, p *prepared, started bool, kind string, limit int) sendResult {
	s.Metrics.oversize.WithLabelValues(kind).Inc()
	s.warnEvery("oversize:"+wk.ID, "worker's answer exceeds the router's cap; the client gets an error",
		"worker", wk.ID, "request", p.id, "kind", kind, "limit_bytes", limit)
	what := "its answer"
	if kind == oversizeEvent {
		what = "an event of its stream"
	}
	e := &apiError{http.StatusBadGateway, "upstream_error",
		fmt.Sprintf("worker %s: %s exceeds %s bytes, the most the router passes on", wk.ID, what, strconv.Itoa(limit)), outcomeUpstreamError}
	if !started {
		clear(w.Header())
		return sendResult{err: e}
	}
	writeStreamError(w, e)
	return sendResult{outcome: outcomeUpstreamError, started: true}
}
