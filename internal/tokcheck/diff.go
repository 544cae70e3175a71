// This file holds the pure part of the check: where two id sequences part.

package tokcheck

// FirstDiff returns the first position at which a and b differ, counting a
// sequence that ends early as differing where it ends; -1 when they are
// equal.
func FirstDiff(a, b []uint32) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return n
	}
	return -1
}

// Diff is where the router's ids for a probe part from the engine's.
type Diff struct {
	Probe string `json:"probe"` // "prompt" or "chat"
	// At is the first differing position; the ids there, when the
	// sequence has one.
	At        int     `json:"position"`
	RouterID  *uint32 `json:"router_id"`
	EngineID  *uint32 `json:"engine_id"`
	RouterLen int     `json:"router_tokens"`
	EngineLen int     `json:"engine_tokens"`
}

// compare returns the Diff of a probe, nil when the ids agree.
func compare(probe string, router, engine []uint32) *Diff {
	at := FirstDiff(router, engine)
	if at < 0 {
		return nil
	}
	d := &Diff{Probe: probe, At: at, RouterLen: len(router), EngineLen: len(engine)}
	if at < len(router) {
		d.RouterID = &router[at]
	}
	if at < len(engine) {
		d.EngineID = &engine[at]
	}
	return d
}
