// This file holds the proxying to the chosen worker: body, headers, SSE pass-through, usage.

package frontdoor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"kvrouter/internal/cost"
	"kvrouter/internal/hints"
	"kvrouter/internal/rawjson"
	"kvrouter/internal/router"
	"kvrouter/internal/upstream"
)

// sendResult is how one attempt at a worker ended.
type sendResult struct {
	retry   retryCause // nothing reached the client, and another worker may serve it
	outcome string     // when the response went out
	err     *apiError  // when it did not
	// worker is the worker to leave out of a retry, when not the
	// decision's (a disaggregated request's failed leg).
	worker string
	// started: part of the answer went out to the client.
	started bool
}

// retryCause says why an attempt may be made again on another worker.
type retryCause uint8

const (
	noRetry retryCause = iota
	// retryRefused: the worker refused the connection; it never saw the
	// request.
	retryRefused
	// retryNoAnswer: the connection broke before any byte of the answer,
	// or before any of it went out to the client (Server.RetryReset): the
	// worker may have started on the request, but generation has no side
	// effects and the client saw nothing.
	retryNoAnswer
)

// maxResponse bounds a non-streamed response body held to read its usage;
// a larger one is not passed on (a variable for tests).
var maxResponse = 64 << 20

var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer",
	"Transfer-Encoding", "Upgrade", "Proxy-Connection"}

// upstreamBody is the body the worker gets: the client's, with the hint
// placed where its engine reads it, the DP rank for SGLang, a usage chunk
// asked for when the client streams, and extra's members (a disaggregated
// request's leg).
func upstreamBody(p *prepared, d *router.Decision, extra ...member) ([]byte, error) {
	body := p.body
	var err error
	if d.HintDecision.Hinted() {
		if body, err = hints.Attach(body, d.Target.Worker.Placement, p.id, d.Hint); err != nil {
			return nil, err
		}
	}
	// The body parsed as a JSON object and the hint went in as valid JSON:
	// the edits below need no further validation pass over the prompt.
	set := extra
	if d.Target.Worker.Engine == router.EngineSGLang {
		local := strconv.Itoa(d.Target.Rank - d.Target.Worker.DPStart)
		set = append(set, member{keyDataParallelRank, []byte(local)})
	}
	if p.req.Stream && !p.req.IncludeUsage {
		// The client's options as parsed (hints do not touch them).
		so := p.req.top[keyStreamOptions]
		if p.req.top == nil {
			so = topMember(body, keyStreamOptions)
		}
		v, err := usageOptions(so)
		if err != nil {
			return nil, err
		}
		set = append(set, member{keyStreamOptions, v})
	}
	if len(set) == 0 {
		return body, nil
	}
	var dst []byte
	if p.bufs != nil {
		dst = p.bufs.out
	}
	if !d.HintDecision.Hinted() && len(extra) == 0 && absent(p.req.top, set) {
		// The usual case: nothing to replace, so the members go in before
		// the closing brace without a pass over the prompt.
		body = appendMembers(dst, body, len(p.req.top), set)
	} else {
		body = editMembers(dst, body, set...)
	}
	if p.bufs != nil {
		p.bufs.out = body
	}
	return body, nil
}

// absent reports whether none of set's keys is among a body's top-level
// members (top nil: not known).
func absent(top map[string]json.RawMessage, set []member) bool {
	if top == nil {
		return false
	}
	for _, m := range set {
		if _, ok := top[m.key]; ok {
			return false
		}
	}
	return true
}

func upstreamPath(k Kind) string {
	if k == KindChat {
		return "/v1/chat/completions"
	}
	return "/v1/completions"
}

// leg is how send treats a leg of a disaggregated request.
type leg struct {
	// ctx, when set, is the upstream request's context instead of the
	// client's: the router cancels a decode leg whose prefill failed.
	ctx context.Context
	// extra are the members of the leg's body beyond the usual.
	extra []member
	// decode: a decode leg, which pulls the prompt's KV rather than
	// computing it and whose hint decision is not its own.
	decode bool
	// calledOff, when set, is asked before a 5xx answer goes out: true
	// drops it, nothing sent (an SGLang decode leg failing because its
	// prefill did, which the router retries).
	calledOff func() bool
}

// upstreamHeader is the head a worker gets: the client's end-to-end
// fields, less the router's own, with the request id and the DP rank.
func upstreamHeader(r *http.Request, p *prepared, t router.Target) http.Header {
	h := make(http.Header, len(r.Header)+4)
	copyHeaders(h, r.Header)
	for _, k := range []string{"Host", "Content-Length", "Accept-Encoding", "Expect", headerTarget, headerDPRank, headerVLLMDPRank} {
		h.Del(k)
	}
	h.Set("Content-Type", "application/json")
	h.Set(headerRequestID, p.id)
	h.Set(headerDPRank, strconv.Itoa(t.Rank))
	if t.Worker.Engine == router.EngineVLLM {
		h.Set(headerVLLMDPRank, strconv.Itoa(t.Rank-t.Worker.DPStart))
	}
	return h
}

func (s *Server) newLoadID() string { return s.Replica + "/" + strconv.FormatUint(s.seq.Add(1), 10) }

// whole reports whether lg is a whole request's (the zero leg).
func (lg *leg) whole() bool {
	return lg.ctx == nil && lg.extra == nil && !lg.decode && lg.calledOff == nil
}

// send forwards the request to the decision's target and streams the answer
// back. Cancelling the client's request cancels the upstream one.
func (s *Server) send(w http.ResponseWriter, r *http.Request, p *prepared, d *router.Decision) sendResult {
	return s.sendLeg(w, r, p, d, leg{})
}

// sendLeg is send for the leg a disaggregated request's answer comes
// from, or, with a zero leg, for a whole request.
func (s *Server) sendLeg(w http.ResponseWriter, r *http.Request, p *prepared, d *router.Decision, lg leg) sendResult {
	body, err := upstreamBody(p, d, lg.extra...)
	if err != nil {
		return sendResult{err: badRequest(err)}
	}
	ctx := r.Context()
	if lg.ctx != nil {
		ctx = lg.ctx
	}
	t := d.Target
	h := upstreamHeader(r, p, t)
	loadID := s.newLoadID()
	bs := t.Worker.BlockSize
	prefill := float64(max(0, d.Tokens-d.Overlap*bs))
	if lg.decode {
		prefill = 0 // pulled from the prefill worker
	}
	s.Load.Start(loadID, cost.Rank{Worker: t.Worker.ID, DP: t.Rank}, prefill, float64(d.Blocks))
	defer s.Load.Finish(loadID)
	s.Router.StartPull(loadID, d)
	defer s.Router.EndPull(loadID)
	// In approximate mode the prompt's blocks are assumed cached from now
	// on, not from the response: a non-streamed one arrives only when the
	// generation ends, and requests sharing the prefix come meanwhile.
	s.Router.Commit(d, s.Now())

	sent := s.Now()
	resp, err := s.Upstream.Do(ctx, &upstream.Request{URL: t.Worker.URL, Path: upstreamPath(p.kind), Header: h, Body: body})
	if s.Trace != nil && err == nil && lg.whole() {
		s.Trace(Timing{Added: resp.Sent.Sub(p.received) - p.tokenized, Tokenize: p.tokenized, Decide: p.decided})
	}
	if err != nil {
		if ctx.Err() != nil && r.Context().Err() == nil {
			// Called off by the router, not failed by the worker.
			return sendResult{err: &apiError{http.StatusBadGateway, "upstream_error", "leg called off", outcomeUpstreamError}}
		}
		return s.sendFailed(r, t.Worker, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 500 && lg.calledOff != nil && lg.calledOff() {
		return sendResult{err: &apiError{http.StatusBadGateway, "upstream_error", "leg called off", outcomeUpstreamError}}
	}
	if !lg.decode {
		s.countDecision(d)
	}

	hinted := strconv.FormatBool(d.HintDecision.Hinted())
	var first time.Time // the first token's arrival, when streamed
	report := func(u *usage) {
		if !lg.decode {
			// A decode leg's first token waits on the hand-over, not on
			// a prefill of its own: nothing to learn of its recompute.
			s.learn(d, u, first.Sub(sent))
		}
		if u.Details != nil {
			s.Metrics.cachedTokens.WithLabelValues(hinted).Add(float64(u.Details.CachedTokens))
		}
		if u.KVRouter != nil {
			s.Metrics.peerRestored.WithLabelValues(hinted).Add(float64(u.KVRouter.PeerRestoredTokens))
		}
	}
	copyHeaders(w.Header(), resp.Header)
	w.Header().Del("Content-Length")
	w.Header().Set(headerWorker, t.Worker.ID)
	outcome := outcomeOK
	switch {
	case resp.StatusCode >= 500:
		outcome = outcomeUpstreamError
	case resp.StatusCode >= 400:
		outcome = outcomeBadRequest
	}
	// The head goes out with the first whole event (or the whole body):
	// an answer that breaks off before then can still fail honestly.
	started := false
	start := func() {
		started = true
		w.WriteHeader(resp.StatusCode)
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		err = relaySSE(w, resp.Body, p.req.Stream && !p.req.IncludeUsage, start, func() { first = s.Now(); s.Load.Prefilled(loadID); s.Router.EndPull(loadID) }, report)
	} else {
		var b []byte
		b, err = readAll(nil, io.LimitReader(resp.Body, int64(maxResponse)+1), resp.ContentLength, int64(maxResponse), nil)
		if err == nil && len(b) > maxResponse {
			err = errAnswerTooLarge
		}
		if err == nil {
			if u := responseUsage(b); u != nil {
				report(u)
			}
			w.Header().Set("Content-Length", strconv.Itoa(len(b)))
			start()
			if _, err = w.Write(b); err != nil {
				err = fmt.Errorf("%w: %v", errClientGone, err)
			}
		}
	}
	switch {
	case r.Context().Err() != nil || errors.Is(err, errClientGone):
		return sendResult{outcome: outcomeCanceled, started: started}
	case err == nil:
		return sendResult{outcome: outcome, started: true}
	case ctx.Err() != nil && !started:
		// The router called the leg off (its prefill failed).
		clear(w.Header())
		return sendResult{err: &apiError{http.StatusBadGateway, "upstream_error", "leg called off", outcomeUpstreamError}}
	case errors.Is(err, errEventTooLarge):
		return s.tooLarge(w, t.Worker, p, started, oversizeEvent, maxEvent)
	case errors.Is(err, errAnswerTooLarge):
		return s.tooLarge(w, t.Worker, p, started, oversizeAnswer, maxResponse)
	}
	s.Metrics.upstreamFailures.WithLabelValues(failureBrokeOff).Inc()
	s.Router.ReportSuspect(t.Worker.ID, t.Worker.URL, s.Now())
	s.warnEvery("broke:"+t.Worker.ID, "worker's answer broke off", "worker", t.Worker.ID, "request", p.id,
		"client_got_part", started, "err", err)
	msg := fmt.Sprintf("worker %s: the answer broke off: %v", t.Worker.ID, err)
	if !started {
		// Nothing of it reached the client: as good as no answer. Its
		// head must not mix with the next attempt's or the error's.
		clear(w.Header())
		return sendResult{retry: retryNoAnswer, err: &apiError{http.StatusBadGateway, "upstream_error", msg, outcomeUpstreamError}}
	}
	// Part of a stream went out under a 200: the client learns of the
	// failure from an error event, and no [DONE] follows (docs/wire.md).
	s.Metrics.streamErrors.Inc()
	writeStreamError(w, &apiError{http.StatusBadGateway, "upstream_error", msg, outcomeUpstreamError})
	return sendResult{outcome: outcomeUpstreamError, started: true}
}

// sendFailed is the result of an attempt that got no answer at all.
func (s *Server) sendFailed(r *http.Request, wk router.Worker, err error) sendResult {
	switch {
	case r.Context().Err() != nil:
		return sendResult{err: &apiError{outcome: outcomeCanceled}}
	case errors.Is(err, syscall.ECONNREFUSED):
		s.Metrics.upstreamFailures.WithLabelValues(failureRefused).Inc()
		if s.Router.ReportRefused(wk.ID, wk.URL, "connection refused", s.Now()) == router.WentDown {
			s.Log.Warn("worker down: it refused a connection; no request goes to it until it answers its health probe",
				"worker", wk.ID, "url", wk.URL)
		}
		return sendResult{retry: retryRefused, err: &apiError{http.StatusBadGateway, "upstream_error",
			fmt.Sprintf("worker %s refused the connection", wk.ID), outcomeUpstreamError}}
	case errors.Is(err, upstream.ErrNoAnswer):
		s.Metrics.upstreamFailures.WithLabelValues(failureNoAnswer).Inc()
		s.Router.ReportSuspect(wk.ID, wk.URL, s.Now())
		return sendResult{retry: retryNoAnswer, err: &apiError{http.StatusBadGateway, "upstream_error",
			fmt.Sprintf("worker %s: %v", wk.ID, err), outcomeUpstreamError}}
	}
	return sendResult{err: &apiError{http.StatusBadGateway, "upstream_error",
		fmt.Sprintf("worker %s: %v", wk.ID, err), outcomeUpstreamError}}
}

// writeStreamError ends a stream with an OpenAI-style error event.
func writeStreamError(w http.ResponseWriter, e *apiError) {
	b, _ := json.Marshal(map[string]errorBody{"error": {Message: e.message, Type: e.kind, Code: e.status}})
	w.Write(append(append([]byte("data: "), b...), "\n\n"...))
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
}

// countDecision records a decision that was acted on.
func (s *Server) countDecision(d *router.Decision) {
	if d.Blocks > 0 {
		s.Metrics.overlap.Observe(float64(d.Overlap) / float64(d.Blocks))
	}
	if d.HintDecision.Hinted() {
		s.Metrics.hints.WithLabelValues("issued", d.HintDecision.Reason.String()).Inc()
	} else {
		s.Metrics.hints.WithLabelValues("skipped", d.HintDecision.Reason.String()).Inc()
	}
}

// copyHeaders copies src's end-to-end fields into dst: not the hop-by-hop
// ones, nor those its Connection field names. Value slices are shared
// rather than copied: both sides only ever replace a field's slice.
func copyHeaders(dst, src http.Header) {
	var named []string // by the Connection field, read once
	for _, v := range src["Connection"] {
		for h := range strings.SplitSeq(v, ",") {
			named = append(named, http.CanonicalHeaderKey(strings.TrimSpace(h)))
		}
	}
	for k, vs := range src {
		if slices.Contains(hopHeaders, k) || slices.Contains(named, k) {
			continue
		}
		dst[k] = vs
	}
}

// usage is the part of an OpenAI usage object the router reports on.
type usage struct {
	PromptTokens int              `json:"prompt_tokens"`
	Details      *promptDetails   `json:"prompt_tokens_details"`
	KVRouter     *kvrouterDetails `json:"kvrouter"`
}

type promptDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

type kvrouterDetails struct {
	PeerRestoredTokens int         `json:"peer_restored_tokens"`
	LocalCachedTokens  *int        `json:"local_cached_tokens"`
	Pull               *pullReport `json:"pull"`
}

// responseUsage returns the usage of a non-streamed answer, nil when it
// has none or is not JSON. Only the usage member is read: the rest (the
// generated text) is passed on as it came.
func responseUsage(b []byte) *usage {
	if !bytes.Contains(b, []byte(`"usage"`)) {
		return nil
	}
	var buf [16]rawjson.Member // on the stack unless the answer has more
	top, ok := rawjson.ScanObject(buf[:0], b, nil)
	if !ok {
		return nil
	}
	raw := lastMember(top, "usage")
	if raw == nil || isNull(raw) {
		return nil
	}
	u, ok := readUsage(raw)
	if !ok {
		return nil
	}
	return u
}

// readUsage reads a usage object (valid JSON) without reflection: it is
// read once per request. ok is false where encoding/json would fail too.
func readUsage(raw []byte) (*usage, bool) {
	var buf [8]rawjson.Member
	ms, ok := rawjson.ScanObject(buf[:0], raw, nil)
	if !ok {
		return nil, false
	}
	u := &usage{}
	if u.PromptTokens, ok = intMember(ms, "prompt_tokens"); !ok {
		return nil, false
	}
	nested := func(key, field string) (n int, set, ok bool) {
		v := lastMember(ms, key)
		if v == nil || isNull(v) {
			return 0, false, true
		}
		var buf [4]rawjson.Member
		inner, ok := rawjson.ScanObject(buf[:0], v, nil)
		if !ok {
			return 0, false, false
		}
		n, ok = intMember(inner, field)
		return n, true, ok
	}
	cached, setCached, ok1 := nested("prompt_tokens_details", "cached_tokens")
	if !ok1 {
		return nil, false
	}
	if setCached {
		u.Details = &promptDetails{cached}
	}
	if v := lastMember(ms, "kvrouter"); v != nil && !isNull(v) {
		if u.KVRouter, ok = readKVRouter(v); !ok {
			return nil, false
		}
	}
	return u, true
}

// lastMember returns the value of the last member named key (as encoding/json
// keeps the last of duplicates), nil when there is none.
func lastMember(ms []rawjson.Member, key string) []byte {
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].Key == key {
			return ms[i].Value
		}
	}
	return nil
}

// intMember reads an integer member; absent or null is 0, as encoding/json
// leaves it.
func intMember(ms []rawjson.Member, key string) (int, bool) {
	v := lastMember(ms, key)
	if v == nil || isNull(v) {
		return 0, true
	}
	n, err := strconv.Atoi(string(v))
	return n, err == nil
}

var (
	errClientGone = errors.New("client went away")
	// errCutEvent: the stream ended within an event, which was dropped.
	errCutEvent = errors.New("the stream ended within an event")
)

// relaySSE passes a server-sent event stream through event by event,
// flushing each. An event goes out only whole, with the blank line that
// ends it: a stream that breaks off drops the part of an event it got, so
// the client never sees half a JSON chunk. start runs before the first
// write; onFirst at the first data event (the first token); report gets the
// usage of the chunk that carries one. dropUsage drops a usage-only chunk
// the client did not ask for. It returns nil at the stream's clean end, an
// errClientGone when writing to the client failed, and otherwise what broke
// the stream (errCutEvent for a clean end within an event).
func relaySSE(w http.ResponseWriter, body io.Reader, dropUsage bool, start, onFirst func(), report func(*usage)) error {
	fl, _ := w.(http.Flusher)
	br := bufio.NewReaderSize(body, 32<<10)
	var ev []byte
	first, started := true, false
	emit := func() error {
		data := eventData(ev)
		if data != nil && first {
			first = false
			onFirst()
		}
		if data != nil && !bytes.Equal(data, []byte("[DONE]")) && bytes.Contains(data, []byte(`"usage"`)) {
			var c struct {
				Choices []json.RawMessage `json:"choices"`
				Usage   *usage            `json:"usage"`
			}
			if json.Unmarshal(data, &c) == nil && c.Usage != nil {
				report(c.Usage)
				if dropUsage && len(c.Choices) == 0 {
					ev = ev[:0]
					return nil
				}
			}
		}
		if !started {
			started = true
			start()
		}
		_, err := w.Write(ev)
		ev = ev[:0]
		if err != nil {
			return fmt.Errorf("%w: %v", errClientGone, err)
		}
		if fl != nil {
			fl.Flush()
		}
		return nil
	}
	for {
		line, err := readLine(br, maxEvent-len(ev))
		if errors.Is(err, errEventTooLarge) {
			return err
		}
		ev = append(ev, line...)
		if len(line) > 0 && (line[0] == '\n' || line[0] == '\r' && len(line) == 2) {
			if werr := emit(); werr != nil {
				return werr
			}
		}
		if err != nil {
			switch {
			case errors.Is(err, context.Canceled):
				return errClientGone
			case err != io.EOF:
				return err
			case len(ev) > 0:
				// A client would drop it too (the SSE rules discard an
				// event the stream ends in), but a line reader would
				// take half a chunk for a whole one.
				return errCutEvent
			}
			if !started { // an empty stream: the head alone
				start()
			}
			return nil
		}
	}
}

// readLine returns the next line with its newline, errEventTooLarge past
// max bytes.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if len(line) > max {
		return nil, errEventTooLarge
	}
	if !errors.Is(err, bufio.ErrBufferFull) {
		return line, err
	}
	out := append([]byte(nil), line...)
	for errors.Is(err, bufio.ErrBufferFull) {
		line, err = br.ReadSlice('\n')
		if len(out)+len(line) > max {
			return nil, errEventTooLarge
		}
		out = append(out, line...)
	}
	return out, err
}

// eventData joins the data lines of an event; nil when it has none.
func eventData(ev []byte) []byte {
	var data []byte
	found := false
	for len(ev) > 0 {
		line := ev
		if i := bytes.IndexByte(ev, '\n'); i >= 0 {
			line, ev = ev[:i], ev[i+1:]
		} else {
			ev = nil
		}
		line = bytes.TrimRight(line, "\r")
		v, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		v = bytes.TrimPrefix(v, []byte(" "))
		if found {
			data = append(data, '\n')
		} else {
			data, found = []byte{}, true
		}
		data = append(data, v...)
	}
	if !found {
		return nil
	}
	return data
}
