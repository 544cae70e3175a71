package hints

import (
	"errors"
	"fmt"
	"slices"
)

// ErrSourceConflict is a second hint for a request naming another source.
var ErrSourceConflict = errors.New("hints: conflicting hint sources for one request")

// Book holds the hints submitted for in-flight requests on a consumer (our
// runner, the simulated engine). Hints are scoped to one request and must
// agree on their source: two sources for the same blocks mean someone is
// confused, and a pull from the wrong peer costs more than a recompute. It
// is not safe for concurrent use; its owner serialises access.
type Book struct {
	entries map[string]*entry
}

type entry struct {
	hint Hint
	seen map[uint64]struct{}
	// poisoned: a conflict dropped the hint; later hints for the request
	// are refused too, so that the outcome does not depend on arrival order.
	poisoned bool
}

// Submit records h for requestID. A hint naming the source already recorded
// merges its keys in; one naming another source drops the request's hint
// entirely and is refused, as is every later one until Discard.
func (b *Book) Submit(requestID string, h Hint) error {
	if err := h.check(); err != nil {
		return err
	}
	if b.entries == nil {
		b.entries = make(map[string]*entry)
	}
	e, ok := b.entries[requestID]
	if !ok {
		e = &entry{hint: Hint{Endpoint: h.Endpoint}, seen: make(map[uint64]struct{}, len(h.BlockHashes))}
		b.entries[requestID] = e
	}
	if e.poisoned {
		return fmt.Errorf("%w: request %q: its hint was already dropped", ErrSourceConflict, requestID)
	}
	if e.hint.Endpoint != h.Endpoint {
		prev := e.hint.Endpoint
		*e = entry{poisoned: true}
		return fmt.Errorf("%w: request %q: %s %q after %q; hint dropped",
			ErrSourceConflict, requestID, keySourceEndpoint, h.Endpoint, prev)
	}
	for _, k := range h.BlockHashes {
		if _, dup := e.seen[k]; !dup {
			e.seen[k] = struct{}{}
			e.hint.BlockHashes = append(e.hint.BlockHashes, k)
		}
	}
	return nil
}

// Lookup returns requestID's hint, if it has a usable one.
func (b *Book) Lookup(requestID string) (Hint, bool) {
	e, ok := b.entries[requestID]
	if !ok || e.poisoned {
		return Hint{}, false
	}
	return Hint{Endpoint: e.hint.Endpoint, BlockHashes: slices.Clone(e.hint.BlockHashes)}, true
}

// Has reports whether requestID's hint names key, the set-membership test a
// runner's query makes.
func (b *Book) Has(requestID string, key uint64) bool {
	e, ok := b.entries[requestID]
	if !ok || e.poisoned {
		return false
	}
	_, in := e.seen[key]
	return in
}

// Discard forgets requestID, when the request finishes or is cancelled.
func (b *Book) Discard(requestID string) { delete(b.entries, requestID) }

// Len is the number of requests with an entry, including dropped ones.
func (b *Book) Len() int { return len(b.entries) }
