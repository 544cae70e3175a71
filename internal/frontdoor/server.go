// This file holds the front door's handlers: read, prepare, decide, retry once, fail OpenAI-style.

package frontdoor

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"kvrouter/internal/cost"
	"kvrouter/internal/hints"
	"kvrouter/internal/router"
	"kvrouter/internal/upstream"
)

// LoadTracker records requests in flight: the router's own load view and,
// through it, its peer replicas'.
type LoadTracker interface {
	Start(id string, r cost.Rank, prefillTokens, blocks float64)
	Prefilled(id string)
	Finish(id string)
}

// Server is the HTTP front door.
type Server struct {
	Router *router.Router
	Tok    Tokenizer
	// Upstream sends requests to workers.
	Upstream *upstream.Client
	Metrics  *Metrics
	Log      *slog.Logger
	Now      func() time.Time
	Load     LoadTracker
	// AllowTargetOverride lets x-kvrouter-target force the worker.
	AllowTargetOverride bool
	// MaxBody bounds a request body in bytes.
	MaxBody int64
	// BodyTimeout bounds the time a client takes to send a body once its
	// head is read (0: DefaultBodyTimeout); MaxBodyMemory bounds the bytes
	// of the bodies held at once (0: DefaultMaxBodyMemory).
	BodyTimeout   time.Duration
	MaxBodyMemory int64
	// Context, when set, says how long each model's context is: longer
	// prompts are refused, before tokenizing when their size tells.
	Context ContextLimits
	// Replica names this router among its peers; load ids carry it.
	Replica string
	// Trace, when set, gets the timing of every request sent to a worker;
	// benchmarks read the router's own share of the latency from it.
	Trace func(Timing)
	// RetryReset sends a request whose connection broke before any byte
	// of the answer reached the client to another worker, once
	// (--retry-reset).
	RetryReset bool
	// PD configures disaggregated serving (router.Plan).
	PD router.PDConfig
	// Learn, when set, learns pull and recompute costs from the answers'
	// usage (learn.go).
	Learn *hints.Learner

	seq       atomic.Uint64
	bodyBytes atomic.Int64 // held by bodies in flight

	warnMu sync.Mutex
	warned map[string]time.Time
}

// warnEvery logs a warning of a kind at most once a minute: the front door
// is a hot path, and a worker that is down would otherwise log per request.
func (s *Server) warnEvery(kind, msg string, args ...any) {
	now := time.Now()
	s.warnMu.Lock()
	if s.warned == nil {
		s.warned = map[string]time.Time{}
	}
	last, seen := s.warned[kind]
	if seen && now.Sub(last) < time.Minute {
		s.warnMu.Unlock()
		s.Log.Debug(msg, args...)
		return
	}
	s.warned[kind] = now
	s.warnMu.Unlock()
	s.Log.Warn(msg, args...)
}

// defaultMaxBody bounds request bodies unless Server.MaxBody says otherwise.
const defaultMaxBody = 32 << 20

// Mount routes the front door on mux: the OpenAI API, /healthz and
// /readyz.
func (s *Server) Mount(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/completions", s.inference(KindCompletion))
	mux.HandleFunc("POST /v1/chat/completions", s.inference(KindChat))
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
}

// apiError is an error for a client, OpenAI-style.
type apiError struct {
	status  int
	kind    string
	message string
	outcome string
}

func (e *apiError) Error() string { return e.message }

func badRequest(err error) *apiError {
	return &apiError{http.StatusBadRequest, "invalid_request_error", err.Error(), outcomeBadRequest}
}

// errorBody is an OpenAI error object, under "error".
type errorBody struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   any    `json:"param"`
	Code    int    `json:"code"`
}

func writeError(w http.ResponseWriter, e *apiError) {
	if e.status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	WriteJSON(w, e.status, map[string]errorBody{"error": {Message: e.message, Type: e.kind, Code: e.status}})
}

// WriteJSON answers with v, indented, as every JSON answer of the router
// service is written: the front door's and the operator views'.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// Timing is where the router spent one request's time before the worker
// got it, for Server.Trace.
type Timing struct {
	// Added runs from the handler's start (headers read) until the
	// upstream request is written, tokenization excluded: what routing
	// adds to a request's latency.
	Added time.Duration
	// Tokenize and Decide are the tokenization and the routing decision
	// (the last one, when a refused connection made the router retry).
	Tokenize, Decide time.Duration
}

// prepared is a request read, stripped and tokenized, ready for decisions.
type prepared struct {
	kind      Kind
	body      []byte // client hints stripped
	req       *Request
	tokens    []uint32
	forced    string
	id        string // the request id: X-Request-Id or made up
	tokenized time.Duration
	received  time.Time // the handler's start, for Trace
	decided   time.Duration
	bufs      *bufs // nil: allocate
}

// bufs are one request's large buffers, pooled: the body as read, its
// prompt's token ids and the body forwarded. For a prompt of 1,536 token
// ids they were 25 KB of the 34 KB a routed request allocated. Nothing
// outside the request keeps any of them: the router keeps the prompt's
// block hashes, not its ids, and the upstream client is done with a body
// when Do returns.
type bufs struct {
	body []byte
	ids  []uint32
	out  []byte
}

var bufPool = sync.Pool{New: func() any { return new(bufs) }}

// maxPooled is the largest buffer put back: a rare huge prompt should not
// pin its size in a pooled set for good.
const maxPooled = 1 << 20

func (b *bufs) release() {
	if cap(b.body) > maxPooled {
		b.body = nil
	}
	if cap(b.ids)*4 > maxPooled {
		b.ids = nil
	}
	if cap(b.out) > maxPooled {
		b.out = nil
	}
	b.body, b.ids, b.out = b.body[:0], b.ids[:0], b.out[:0]
	bufPool.Put(b)
}

// prepare does everything before the routing decision. Stripping client
// hints and transfer fields comes first: nothing downstream may see them.
func (s *Server) prepare(r *http.Request, body []byte, kind Kind, bf *bufs) (*prepared, *apiError) {
	var ids []uint32
	if bf != nil {
		ids = bf.ids
	}
	req, ok := parseClean(kind, body, ids)
	var err error
	if !ok {
		if body, _, err = hints.Strip(body); err != nil {
			return nil, badRequest(fmt.Errorf("%w: %v", ErrBadRequest, err))
		}
		// Nor may a client steer the engines' KV transfers: the router
		// owns disaggregation.
		body = dropOwned(body)
		if req, err = parseValid(kind, body); err != nil { // Strip validated it
			return nil, badRequest(err)
		}
	}
	if bf != nil && req.Tokens != nil {
		bf.ids = req.Tokens // its memory, grown or not, for the next request
	}
	p := &prepared{kind: kind, body: body, req: req, id: r.Header.Get(headerRequestID), bufs: bf}
	if p.id == "" {
		p.id = newID()
	}
	if p.forced = r.Header.Get(headerTarget); p.forced != "" && !s.AllowTargetOverride {
		return nil, &apiError{http.StatusForbidden, "permission_error",
			headerTarget + " is disabled on this router; start it with --allow-target-override to force a worker", outcomeBadRequest}
	}
	req.context = s.contextOf(req.Model)
	start := time.Now()
	p.tokens, err = s.Tok.Tokenize(r.Context(), req)
	p.tokenized = time.Since(start)
	s.Metrics.tokenize.Observe(p.tokenized.Seconds())
	if err == nil {
		err = checkContext(req.Model, len(p.tokens), req.context)
	}
	var unserved error
	if err != nil && !errors.Is(err, ErrBadRequest) {
		unserved = s.Router.CheckModel(req.Model)
	}
	switch {
	case errors.Is(err, ErrPromptTooLong):
		s.refused(refusedPromptLong)
		return nil, badRequest(err)
	case errors.Is(err, ErrBadRequest):
		return nil, badRequest(err)
	case err != nil && r.Context().Err() != nil:
		return nil, &apiError{http.StatusBadRequest, "invalid_request_error", "canceled", outcomeCanceled}
	case err != nil && unserved != nil:
		// An engine tokenizer had no worker to ask: the request is for a
		// model nobody serves, which is what its client must hear.
		return nil, modelError(unserved)
	case err != nil:
		// Route on load alone rather than fail a request the engine
		// would serve.
		s.Metrics.tokenizeErrors.WithLabelValues("engine").Inc()
		s.warnEvery("tokenize", "tokenization failed; routing on load alone", "model", req.Model, "err", err)
		p.tokens = nil
	case p.tokens == nil:
		s.Metrics.tokenizeErrors.WithLabelValues("unsupported_content").Inc()
	}
	return p, nil
}

// plan asks the routing decision core how to serve a prepared request.
func (s *Server) plan(p *prepared, exclude []string, explain bool) (*router.Plan, time.Duration, *apiError) {
	start := time.Now()
	pl, err := s.Router.Plan(p.request(exclude, explain), s.PD)
	took := time.Since(start)
	s.Metrics.decision.Observe(took.Seconds())
	if aerr := s.decisionError(p, err); aerr != nil {
		return nil, took, aerr
	}
	return pl, took, nil
}

// request is what the decision core is asked about p.
func (p *prepared) request(exclude []string, explain bool) router.Request {
	return router.Request{Model: p.req.Model, LoRA: p.req.loraPath(), Tokens: p.tokens, Salt: p.req.Salt,
		Exclude: exclude, Target: p.forced, Explain: explain}
}

// modelError is the client's error for a model no worker serves: 404, or
// 503 while a router that just started has not read the registrations yet
// (the model may well be served; writeError adds Retry-After).
func modelError(err error) *apiError {
	var me *router.ModelError
	if errors.As(err, &me) && me.Pending {
		return &apiError{http.StatusServiceUnavailable, "service_unavailable", err.Error(), outcomeNoWorker}
	}
	return &apiError{http.StatusNotFound, "not_found_error", err.Error(), outcomeNoWorker}
}

// decisionError is the client's error for a decision that failed.
func (s *Server) decisionError(p *prepared, err error) *apiError {
	var me *router.ModelError
	switch {
	case errors.As(err, &me):
		return modelError(me)
	case errors.Is(err, router.ErrNoWorker) && p.forced != "":
		return &apiError{http.StatusNotFound, "not_found_error", err.Error(), outcomeNoWorker}
	case err != nil:
		return &apiError{http.StatusServiceUnavailable, "service_unavailable", err.Error(), outcomeNoWorker}
	}
	return nil
}

func (s *Server) inference(kind Kind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var received time.Time
		if s.Trace != nil {
			received = time.Now()
		}
		bf := bufPool.Get().(*bufs)
		defer bf.release()
		body, held, aerr := s.readBody(w, r, bf.body)
		defer s.releaseBody(held)
		if aerr != nil {
			s.fail(w, aerr)
			return
		}
		bf.body = body
		p, aerr := s.prepare(r, body, kind, bf)
		if aerr != nil {
			s.fail(w, aerr)
			return
		}
		p.received = received
		s.route(w, r, p)
	}
}

// maxAttempts bounds the workers one request is tried on: a refused
// connection is retried elsewhere (nothing was sent), and so, once, is one
// that broke before any answer.
const maxAttempts = 3

// route decides and sends, again on another worker when the first attempt
// reached nobody.
func (s *Server) route(w http.ResponseWriter, r *http.Request, p *prepared) {
	var exclude []string
	var last sendResult // the attempt before, when retrying
	prev, noAnswers := "", 0
	for attempt := 1; ; attempt++ {
		pl, took, aerr := s.plan(p, exclude, false)
		if aerr != nil {
			if last.err != nil {
				// No worker left to retry on: the first failure says
				// more than "every worker was excluded".
				s.warnEvery("noretry:"+prev, "worker failed before answering and no other worker is left to retry on",
					"worker", prev, "request", p.id, "err", last.err.message, "decision", aerr.message)
				aerr = last.err
			}
			s.fail(w, aerr)
			return
		}
		if last.err != nil {
			s.warnEvery("retry:"+prev, "worker failed before answering; retrying on another",
				"worker", prev, "retry_on", pl.Decode.Target.Worker.ID, "request", p.id, "err", last.err.message)
			s.Metrics.retries.Inc()
		}
		p.decided = took
		s.countPlan(pl)
		var res sendResult
		if pl.Prefill != nil {
			res = s.sendPD(w, r, p, pl)
		} else {
			res = s.send(w, r, p, pl.Decode)
		}
		retry := res.retry == retryRefused || (res.retry == retryNoAnswer && s.RetryReset && noAnswers == 0)
		if retry && p.forced == "" && attempt < maxAttempts {
			// Nothing reached the client yet: try elsewhere.
			if res.retry == retryNoAnswer {
				noAnswers++
			}
			prev, last = pl.Decode.Target.Worker.ID, res
			if res.worker != "" {
				prev = res.worker
			}
			exclude = append(exclude, prev)
			continue
		}
		if res.err != nil {
			s.fail(w, res.err)
			return
		}
		s.Metrics.requests.WithLabelValues(res.outcome).Inc()
		return
	}
}

func (s *Server) fail(w http.ResponseWriter, e *apiError) {
	s.Metrics.requests.WithLabelValues(e.outcome).Inc()
	if e.outcome != outcomeCanceled {
		writeError(w, e)
	}
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	type card struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
		Parent  string `json:"parent,omitempty"`
	}
	data := []card{}
	for _, m := range s.Router.Models() {
		data = append(data, card{ID: m, Object: "model", OwnedBy: "kvrouter"})
	}
	// LoRA adapters as vLLM lists them: by name, with their base model.
	adapters := s.Router.Adapters()
	for _, a := range slices.Sorted(maps.Keys(adapters)) {
		data = append(data, card{ID: a, Object: "model", OwnedBy: "kvrouter", Parent: adapters[a]})
	}
	WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// healthz says the router service runs: liveness, whatever its workers.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	st := s.Router.Stats()
	WriteJSON(w, http.StatusOK, map[string]any{
		"status":         "ok",
		"workers":        st.WorkersByMode[router.ModeEvents] + st.WorkersByMode[router.ModeApproximate],
		"models":         s.Router.Models(),
		"discovery_live": st.DiscoveryLive,
	})
}

// readyz says whether requests can be served: ready once at least one
// registered worker is not down, 503 with the reason otherwise.
func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	st := s.Router.Stats()
	workers := st.WorkersByMode[router.ModeEvents] + st.WorkersByMode[router.ModeApproximate]
	out := map[string]any{
		"status":         "ready",
		"workers":        workers,
		"workers_down":   st.WorkersDown,
		"models":         s.Router.Models(),
		"discovery_live": st.DiscoveryLive,
	}
	status := http.StatusOK
	switch {
	case workers == 0:
		status, out["status"] = http.StatusServiceUnavailable, "not_ready"
		out["reason"] = "no worker is registered: give --worker, or start state agents on this router's NATS"
	case st.WorkersDown == workers:
		status, out["status"] = http.StatusServiceUnavailable, "not_ready"
		out["reason"] = "every worker is down: they refuse connections or fail their health probes"
	}
	WriteJSON(w, status, out)
}

func newID() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
