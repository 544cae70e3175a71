// This file holds disaggregated requests' two legs as each engine's protocol runs them, and their failures.

package frontdoor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"kvrouter/internal/cost"
	"kvrouter/internal/hints"
	"kvrouter/internal/rawjson"
	"kvrouter/internal/router"
	"kvrouter/internal/upstream"
)

// Members of disaggregated serving, which the router owns: a client's are
// dropped (docs/wire.md §11).
const (
	keyKVTransferParams    = "kv_transfer_params" // vLLM
	keyBootstrapHost       = "bootstrap_host"     // SGLang
	keyBootstrapPort       = "bootstrap_port"
	keyBootstrapRoom       = "bootstrap_room"
	keyMaxTokens           = "max_tokens"
	keyMaxCompletionTokens = "max_completion_tokens"
	keyMinTokens           = "min_tokens"
	keyMinCompletionTokens = "min_completion_tokens"

	// defaultBootstrapPort is SGLang's disaggregation_bootstrap_port.
	defaultBootstrapPort = 8998
)

// routerOwned reports whether a client body's top-level member is one the
// router writes itself: a client must not steer the engines' KV transfers.
func routerOwned(key string) bool {
	switch key {
	case keyKVTransferParams, keyBootstrapHost, keyBootstrapPort, keyBootstrapRoom:
		return true
	}
	return false
}

// dropOwned removes the router-owned members from a body known to be a
// valid JSON object, keeping the rest byte for byte.
func dropOwned(body []byte) []byte {
	var buf [16]rawjson.Member
	ms, _ := rawjson.Members(buf[:0], body, rawjson.SkipSpace(body, 0))
	if !slices.ContainsFunc(ms, func(m rawjson.Member) bool { return routerOwned(m.Key) }) {
		return body
	}
	return rewriteMembers(nil, body, routerOwned, nil)
}

// rewriteMembers drops the top-level members drop names, then sets set's,
// over dst's memory, in a body known to be a valid JSON object.
func rewriteMembers(dst, body []byte, drop func(string) bool, set []member) []byte {
	open := rawjson.SkipSpace(body, 0)
	var buf [16]rawjson.Member
	ms, closing := rawjson.Members(buf[:0], body, open)
	out := slices.Grow(dst[:0], len(body)+setSize(set))
	out = append(out, body[:open+1]...)
	kept := 0
	for _, m := range ms {
		if drop(m.Key) || setsKey(set, m.Key) {
			continue
		}
		if kept > 0 {
			out = append(out, ',')
		}
		out = append(out, body[m.Start:m.End]...)
		kept++
	}
	out = appendSet(out, kept, set)
	out = append(out, '}')
	return append(out, body[closing+1:]...)
}

// Labels of the disaggregation metrics.
const (
	legPrefill = "prefill"
	legDecode  = "decode"
	legOK      = "ok"
	legFailed  = "failed"
	legClient  = "rejected" // the worker refused the request itself (4xx)

	fallbackRetry      = "prefill_retried" // a failed prefill leg went to another prefill worker
	fallbackDecode     = "decode_whole"    // ... the decode worker ran the whole request
	fallbackAggregated = "aggregated"      // ... an aggregated worker ran it (SGLang)
	fallbackNone       = "none_left"       // ... no worker was left: the client got the failure
)

// countPlan records how a request is served.
func (s *Server) countPlan(pl *router.Plan) {
	if pl.Skip != router.SkipNone {
		s.Metrics.pdSkips.WithLabelValues(pl.Skip.String()).Inc()
	}
}

func (s *Server) countLeg(leg string, res sendResult) {
	outcome := legOK
	switch {
	case res.err != nil:
		outcome = legFailed
	case res.outcome == outcomeBadRequest:
		outcome = legClient
	case res.outcome != outcomeOK && res.outcome != outcomeCanceled:
		outcome = legFailed
	}
	s.Metrics.pdLegs.WithLabelValues(leg, outcome).Inc()
}

// sendPD runs a disaggregated request's two legs, as the decode worker's
// engine takes them.
func (s *Server) sendPD(w http.ResponseWriter, r *http.Request, p *prepared, pl *router.Plan) sendResult {
	if pl.Decode.Target.Worker.Engine == router.EngineSGLang {
		return s.sendSGLang(w, r, p, pl)
	}
	return s.sendVLLM(w, r, p, pl)
}

// answer is a worker's whole answer, passed to the client as it came.
type answer struct {
	status int
	header http.Header
	body   []byte
}

func (s *Server) writeAnswer(w http.ResponseWriter, worker string, a *answer) sendResult {
	copyHeaders(w.Header(), a.header)
	w.Header().Set("Content-Length", strconv.Itoa(len(a.body)))
	w.Header().Set(headerWorker, worker)
	w.WriteHeader(a.status)
	w.Write(a.body)
	outcome := outcomeBadRequest
	if a.status >= 500 {
		outcome = outcomeUpstreamError
	}
	return sendResult{outcome: outcome, started: true}
}

// prefillResult is how a prefill leg ended: with the KV handed over
// (params for vLLM), with an answer for the client (the worker refused the
// request itself), or failed.
type prefillResult struct {
	params []byte
	answer *answer
	fail   *apiError
}

// prefillLeg sends a prefill leg and reads its whole answer. ctx may be
// called off by the router (SGLang's decode leg ended first).
func (s *Server) prefillLeg(ctx context.Context, r *http.Request, p *prepared, d *router.Decision, body []byte, vllm bool) prefillResult {
	t := d.Target
	bs := t.Worker.BlockSize
	loadID := s.newLoadID()
	s.Load.Start(loadID, cost.Rank{Worker: t.Worker.ID, DP: t.Rank}, float64(max(0, d.Tokens-d.Overlap*bs)), float64(d.Blocks))
	defer s.Load.Finish(loadID)
	s.Router.Commit(d, s.Now())
	resp, err := s.Upstream.Do(ctx, &upstream.Request{URL: t.Worker.URL, Path: upstreamPath(p.kind), Header: upstreamHeader(r, p, t), Body: body})
	if err != nil {
		if ctx.Err() != nil && r.Context().Err() == nil {
			return prefillResult{fail: &apiError{http.StatusBadGateway, "upstream_error", "prefill leg called off", outcomeUpstreamError}}
		}
		res := s.sendFailed(r, t.Worker, err)
		if res.err == nil {
			res.err = &apiError{http.StatusBadGateway, "upstream_error", err.Error(), outcomeUpstreamError}
		}
		return prefillResult{fail: res.err}
	}
	defer resp.Body.Close()
	b, err := readAll(nil, io.LimitReader(resp.Body, int64(maxResponse)+1), resp.ContentLength, int64(maxResponse), nil)
	if err == nil && len(b) > maxResponse {
		// A prefill answers one token: this is no prefill's answer.
		err = errAnswerTooLarge
	}
	s.countDecision(d)
	s.Load.Prefilled(loadID)
	msg := func(format string, args ...any) prefillResult {
		return prefillResult{fail: &apiError{http.StatusBadGateway, "upstream_error",
			fmt.Sprintf("prefill worker %s: ", t.Worker.ID) + fmt.Sprintf(format, args...), outcomeUpstreamError}}
	}
	switch {
	case err != nil && ctx.Err() != nil && r.Context().Err() == nil:
		return prefillResult{fail: &apiError{http.StatusBadGateway, "upstream_error", "prefill leg called off", outcomeUpstreamError}}
	case err != nil:
		s.Metrics.upstreamFailures.WithLabelValues(failureBrokeOff).Inc()
		s.Router.ReportSuspect(t.Worker.ID, t.Worker.URL, s.Now())
		return msg("the answer broke off: %v", err)
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		return prefillResult{answer: &answer{resp.StatusCode, resp.Header, b}}
	case resp.StatusCode != http.StatusOK:
		return msg("status %d: %s", resp.StatusCode, bytes.TrimSpace(b[:min(len(b), 512)]))
	case !vllm:
		return prefillResult{}
	}
	params := transferParams(b)
	if params == nil {
		s.warnEvery("noparams:"+t.Worker.ID, "prefill worker answered without kv_transfer_params; is its KV connector set up for disaggregation?",
			"worker", t.Worker.ID)
		return msg("the answer carries no kv_transfer_params object")
	}
	return prefillResult{params: params}
}

// transferParams is the kv_transfer_params object of a vLLM prefill's
// answer; nil when it has none.
func transferParams(b []byte) []byte {
	var buf [16]rawjson.Member
	top, ok := rawjson.ScanObject(buf[:0], b, nil)
	if !ok {
		return nil
	}
	v := lastMember(top, keyKVTransferParams)
	if len(v) == 0 || v[0] != '{' {
		return nil
	}
	return v
}

// vllmPrefillParams is the prefill leg's kv_transfer_params
// (NixlConnector's request for a remote decode), with the hint when the
// worker reads it in there.
func vllmPrefillParams(p *prepared, d *router.Decision) ([]byte, error) {
	base := []byte(`{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)
	pl := d.Target.Worker.Placement
	if !d.HintDecision.Hinted() || (pl != hints.PlaceVLLM && pl != hints.PlaceVLLMOld) {
		return base, nil
	}
	wrapped, err := hints.Attach(append(append([]byte(`{"`+keyKVTransferParams+`":`), base...), '}'), pl, p.id, d.Hint)
	if err != nil {
		return nil, err
	}
	return topMember(wrapped, keyKVTransferParams), nil
}

// vllmPrefillBody is the prefill leg's body, as vLLM's disaggregation
// proxies write it: one token, not streamed, kv_transfer_params asking for
// a remote decode; min_tokens and the stream options go.
func vllmPrefillBody(p *prepared, d *router.Decision) ([]byte, error) {
	params, err := vllmPrefillParams(p, d)
	if err != nil {
		return nil, err
	}
	body := p.body
	if pl := d.Target.Worker.Placement; d.HintDecision.Hinted() && pl != hints.PlaceVLLM && pl != hints.PlaceVLLMOld {
		if body, err = hints.Attach(body, pl, p.id, d.Hint); err != nil {
			return nil, err
		}
	}
	one := []byte("1")
	set := []member{{keyKVTransferParams, params}, {keyStream, []byte("false")}, {keyMaxTokens, one}}
	if topMember(body, keyMaxCompletionTokens) != nil {
		set = append(set, member{keyMaxCompletionTokens, one})
	}
	drop := func(k string) bool { return k == keyStreamOptions || k == keyMinTokens || k == keyMinCompletionTokens }
	return rewriteMembers(nil, body, drop, set), nil
}

// sendVLLM runs vLLM's protocol: the prefill leg first, whose answer's
// kv_transfer_params go with the client's request to the decode worker.
// A failed prefill leg is tried on another prefill worker, then the decode
// worker runs the whole request.
func (s *Server) sendVLLM(w http.ResponseWriter, r *http.Request, p *prepared, pl *router.Plan) sendResult {
	pre := pl.Prefill
	var tried []string
	for {
		body, err := vllmPrefillBody(p, pre)
		if err != nil {
			return sendResult{err: badRequest(err)}
		}
		res := s.prefillLeg(r.Context(), r, p, pre, body, true)
		switch {
		case res.params != nil:
			s.Metrics.pdLegs.WithLabelValues(legPrefill, legOK).Inc()
			out := s.sendLeg(w, r, p, pl.Decode, leg{extra: []member{{keyKVTransferParams, res.params}}, decode: true})
			s.countLeg(legDecode, out)
			return out
		case res.answer != nil:
			s.Metrics.pdLegs.WithLabelValues(legPrefill, legClient).Inc()
			return s.writeAnswer(w, pre.Target.Worker.ID, res.answer)
		case r.Context().Err() != nil:
			return sendResult{err: &apiError{outcome: outcomeCanceled}}
		}
		s.Metrics.pdLegs.WithLabelValues(legPrefill, legFailed).Inc()
		tried = append(tried, pre.Target.Worker.ID)
		next, err := s.nextPrefill(p, tried, pl.Decode.Target.Worker.Engine)
		if err != nil {
			s.warnEvery("pdfallback:"+pre.Target.Worker.ID, "prefill leg failed and no other prefill worker is left; the decode worker runs the whole request",
				"prefill", pre.Target.Worker.ID, "decode", pl.Decode.Target.Worker.ID, "request", p.id, "err", res.fail.message)
			s.Metrics.pdFallbacks.WithLabelValues(fallbackDecode).Inc()
			out := s.send(w, r, p, pl.Decode)
			s.countLeg(legDecode, out)
			return out
		}
		s.warnEvery("pdretry:"+pre.Target.Worker.ID, "prefill leg failed; retrying it on another prefill worker",
			"prefill", pre.Target.Worker.ID, "retry_on", next.Target.Worker.ID, "request", p.id, "err", res.fail.message)
		s.Metrics.pdFallbacks.WithLabelValues(fallbackRetry).Inc()
		pre = next
	}
}

// nextPrefill chooses another prefill worker of engine for a request
// whose prefill leg failed on those tried; an error when none is left (or
// enough were tried).
func (s *Server) nextPrefill(p *prepared, tried []string, engine string) (*router.Decision, error) {
	if len(tried) >= maxAttempts {
		return nil, fmt.Errorf("%w: %d prefill workers tried", router.ErrNoWorker, len(tried))
	}
	req := p.request(tried, false)
	req.Leg, req.Engine = router.LegPrefill, engine
	return s.Router.Decide(req)
}

// sendSGLang runs SGLang's protocol: both legs at once, each told the
// prefill's bootstrap server and the request's room; the answer comes from
// the decode worker, which waits for the prefill's KV. A prefill leg that
// fails before any of the answer went out calls the decode leg off and is
// tried again on another prefill worker; with none left, an aggregated
// worker serves the whole request (an SGLang decode server cannot).
func (s *Server) sendSGLang(w http.ResponseWriter, r *http.Request, p *prepared, pl *router.Plan) sendResult {
	pre := pl.Prefill
	var tried []string
	for {
		extra, err := bootstrapMembers(pre)
		if err != nil {
			return sendResult{err: &apiError{http.StatusBadGateway, "upstream_error", err.Error(), outcomeUpstreamError}}
		}
		body, err := upstreamBody(p, pre, extra...)
		if err != nil {
			return sendResult{err: badRequest(err)}
		}
		// The decode leg's body is written over the same pooled buffer
		// while this one is being sent.
		body = slices.Clone(body)
		ctx, cancel := context.WithCancel(r.Context())
		var res prefillResult
		prefilled := make(chan struct{})
		go func() {
			defer close(prefilled)
			if res = s.prefillLeg(ctx, r, p, pre, body, false); res.fail != nil || res.answer != nil {
				cancel() // the decode leg would wait for KV that is not coming
			}
		}()
		// A decode server fails at once when it cannot reach the prefill's
		// bootstrap server: that is the prefill's failure, to retry.
		calledOff := func() bool { return waitPrefill(prefilled, r.Context()) && (res.fail != nil || res.answer != nil) }
		out := s.sendLeg(w, r, p, pl.Decode, leg{ctx: ctx, extra: extra, decode: true, calledOff: calledOff})
		if out.err == nil || out.started {
			// The decode leg answered: the prefill's own answer no
			// longer matters.
			cancel()
			<-prefilled
			s.countPrefill(res, out)
			s.countLeg(legDecode, out)
			return out
		}
		// The decode leg failed with nothing sent: because its prefill did,
		// or on its own (the prefill still running then).
		ended := waitPrefill(prefilled, r.Context())
		cancel()
		<-prefilled
		prefillFailed := ended && (res.fail != nil || res.answer != nil)
		switch {
		case r.Context().Err() != nil:
			return sendResult{err: &apiError{outcome: outcomeCanceled}}
		case !prefillFailed:
			// The decode leg failed on its own: the outer loop retries it
			// elsewhere or tells the client.
			s.Metrics.pdLegs.WithLabelValues(legPrefill, legOK).Inc()
			s.countLeg(legDecode, out)
			return out
		case res.answer != nil:
			s.Metrics.pdLegs.WithLabelValues(legPrefill, legClient).Inc()
			return s.writeAnswer(w, pre.Target.Worker.ID, res.answer)
		}
		s.Metrics.pdLegs.WithLabelValues(legPrefill, legFailed).Inc()
		tried = append(tried, pre.Target.Worker.ID)
		next, err := s.nextPrefill(p, tried, pl.Decode.Target.Worker.Engine)
		if err == nil {
			s.warnEvery("pdretry:"+pre.Target.Worker.ID, "prefill leg failed; retrying the pair with another prefill worker",
				"prefill", pre.Target.Worker.ID, "retry_on", next.Target.Worker.ID, "request", p.id, "err", res.fail.message)
			s.Metrics.pdFallbacks.WithLabelValues(fallbackRetry).Inc()
			pre = next
			continue
		}
		req := p.request(tried, false)
		req.Leg = router.LegWhole
		d, err := s.Router.Decide(req)
		if err != nil {
			s.Metrics.pdFallbacks.WithLabelValues(fallbackNone).Inc()
			return sendResult{err: res.fail}
		}
		s.warnEvery("pdfallback:"+pre.Target.Worker.ID, "prefill leg failed and no other prefill worker is left; an aggregated worker runs the whole request",
			"prefill", pre.Target.Worker.ID, "worker", d.Target.Worker.ID, "request", p.id, "err", res.fail.message)
		s.Metrics.pdFallbacks.WithLabelValues(fallbackAggregated).Inc()
		return s.send(w, r, p, d)
	}
}

// waitPrefill waits a moment for the prefill leg to end after the decode
// leg failed: a decode worker fails fast when its prefill did, and the
// prefill's failure says what went wrong. false when it is still running
// (a second is far beyond a refused connection's or an error's time).
func waitPrefill(prefilled <-chan struct{}, ctx context.Context) bool {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-prefilled:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

func (s *Server) countPrefill(res prefillResult, decode sendResult) {
	switch {
	case res.answer != nil:
		s.Metrics.pdLegs.WithLabelValues(legPrefill, legClient).Inc()
	case res.fail != nil && decode.err != nil:
		s.Metrics.pdLegs.WithLabelValues(legPrefill, legFailed).Inc()
	default:
		// Called off once the decode leg answered, or done.
		s.Metrics.pdLegs.WithLabelValues(legPrefill, legOK).Inc()
	}
}

// bootstrapMembers are the members both legs of an SGLang request carry:
// the prefill worker's host (from its URL, IPv6 bracketed as SGLang's
// router writes it), its bootstrap port, and a random room (< 2^63) that
// SGLang's follow_bootstrap_room maps to the prefill's chosen DP rank
// (room mod its DP size).
func bootstrapMembers(d *router.Decision) ([]member, error) {
	u, err := url.Parse(d.Target.Worker.URL)
	if err != nil || u.Hostname() == "" {
		return nil, fmt.Errorf("prefill worker %s: url %q names no host for bootstrap_host", d.Target.Worker.ID, d.Target.Worker.URL)
	}
	host := u.Hostname()
	if ip := net.ParseIP(host); ip != nil && ip.To4() == nil {
		host = "[" + host + "]"
	}
	port := d.Target.Worker.BootstrapPort
	if port == 0 {
		port = defaultBootstrapPort
	}
	var b [8]byte
	rand.Read(b[:])
	room := binary.LittleEndian.Uint64(b[:]) >> 2 // below 2^62: room adjusted below stays under 2^63
	dp := uint64(d.Target.Worker.DPSize)
	room = room - room%dp + uint64(d.Target.Rank-d.Target.Worker.DPStart)
	hostJSON, _ := json.Marshal(host) // a string always marshals
	return []member{
		{keyBootstrapHost, hostJSON},
		{keyBootstrapPort, []byte(strconv.Itoa(port))},
		{keyBootstrapRoom, []byte(strconv.FormatUint(room, 10))},
	}, nil
}
