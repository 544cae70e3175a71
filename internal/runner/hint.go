// This file holds the hints a runner keeps per request: which peer holds which blocks.

package runner

import "fmt"

// Hint says which peer holds which blocks for one request, as parsed from
// the router's kv.fetch hint.
type Hint struct {
	Source string   // the peer's control endpoint, tcp://host:port
	Keys   []uint64 // engine block hashes the peer is said to hold
}

type hintState struct {
	source string
	// keys maps each hinted key to whether this request gave up on it (the
	// peer lacked it or the pull failed): given-up keys read MISS and are
	// not asked for again.
	keys     map[uint64]bool
	conflict bool
}

// SubmitHint scopes hint to requestID. A second hint with the same source
// adds its keys; one with another source fails closed: the request keeps no
// hint (every hinted key reads MISS) until DiscardHint.
func (r *Runner) SubmitHint(requestID string, hint Hint) error {
	switch {
	case requestID == "":
		return fmt.Errorf("%w: empty request id", ErrHint)
	case hint.Source == "":
		return fmt.Errorf("%w: empty source endpoint", ErrHint)
	case len(hint.Keys) == 0:
		return fmt.Errorf("%w: no block hashes", ErrHint)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.hints[requestID]
	if !ok {
		if len(r.hints) >= r.cfg.MaxHints {
			return fmt.Errorf("%w: %d requests hold hints (max hints)", ErrTooManyHints, len(r.hints))
		}
		h = &hintState{source: hint.Source, keys: make(map[uint64]bool, len(hint.Keys))}
		r.hints[requestID] = h
	}
	if h.conflict {
		return fmt.Errorf("request %q: %w", requestID, ErrHintConflict)
	}
	if h.source != hint.Source {
		h.conflict = true
		clear(h.keys)
		return fmt.Errorf("request %q: %w: source %q, then %q", requestID, ErrHintConflict, h.source, hint.Source)
	}
	for _, k := range hint.Keys {
		if _, seen := h.keys[k]; !seen {
			h.keys[k] = false
		}
	}
	return nil
}

// DiscardHint forgets requestID's hint.
func (r *Runner) DiscardHint(requestID string) {
	r.mu.Lock()
	delete(r.hints, requestID)
	r.mu.Unlock()
}
