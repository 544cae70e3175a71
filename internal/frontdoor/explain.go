// This file holds the front door's explained decisions, for POST /debug/route.

package frontdoor

import (
	"net/http"
	"time"

	"kvrouter/internal/router"
)

// Explained is a request taken through the front door as far as its
// decision, explained, with nothing sent or recorded.
type Explained struct {
	// Decision is the decision of the leg the answer comes from: the
	// whole request, or a disaggregated request's decode leg.
	Decision *router.Decision
	// Plan is the whole plan, with the prefill leg when there is one.
	Plan *router.Plan
	// RequestID is the id a hint placed in the body would carry.
	RequestID string
	// Tokenize and Decide are the time tokenization and the decision took.
	Tokenize, Decide time.Duration
}

// Explain answers the decision a request would get; the body tells which
// endpoint it was meant for. When the request cannot be decided, Explain
// has written the error to w and ok is false.
func (s *Server) Explain(w http.ResponseWriter, r *http.Request) (e Explained, ok bool) {
	body, held, aerr := s.readBody(w, r, nil)
	defer s.releaseBody(held)
	if aerr != nil {
		writeError(w, aerr)
		return Explained{}, false
	}
	p, aerr := s.prepare(r, body, guessKind(body), nil)
	if aerr != nil {
		writeError(w, aerr)
		return Explained{}, false
	}
	pl, took, aerr := s.plan(p, nil, true)
	if aerr != nil {
		writeError(w, aerr)
		return Explained{}, false
	}
	return Explained{Decision: pl.Decode, Plan: pl, RequestID: p.id, Tokenize: p.tokenized, Decide: took}, true
}
