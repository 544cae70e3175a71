// This file holds the workers' health: down on a refused connection or failed probes, up at the first answer.

package router

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// A worker whose engine died keeps its registration (its lease, its
// --worker flag) and, until something says otherwise, its inventory: left
// alone, the router would go on choosing it and every request sent there
// would be refused. So the service reports what it sees, a connection
// refused or the result of a probe of the engine's health endpoint, and the
// router marks the worker down: no decision chooses it (unless forced) and
// its ranks name no hint source. Its inventory is kept: a worker that was
// merely slow to answer comes back with its caches, and one that restarted
// says so on its event stream. Its cache owners are left to the cache-owner
// rules: their runners may outlive the engine. Down workers are probed with
// back-off until they answer, which brings them back.

// HealthConfig paces the probes of workers' health endpoints and says when
// failures make a worker down.
type HealthConfig struct {
	// Interval is how often an up worker is probed; 0 probes only the
	// workers marked down (to bring them back) and those under suspicion.
	Interval time.Duration
	// DownAfter is how many consecutive failed probes (a timeout, a broken
	// or 5xx answer) mark an up worker down; a refused connection marks it
	// down at once. Below 1 counts as 1.
	DownAfter int
	// Backoff is the delay before a down worker's first probe (and before
	// confirming a first failure); it doubles with every failure up to
	// MaxBackoff. Zero values take DefaultBackoff and DefaultMaxBackoff.
	Backoff, MaxBackoff time.Duration
}

// Health probe back-off defaults.
const (
	DefaultBackoff    = 250 * time.Millisecond
	DefaultMaxBackoff = 10 * time.Second
)

// ProbeOutcome is what one probe of a worker's health endpoint found.
type ProbeOutcome uint8

const (
	// ProbeOK: the engine's HTTP server answered, with anything but 5xx.
	ProbeOK ProbeOutcome = iota
	// ProbeFailed: it timed out, broke off or answered 5xx.
	ProbeFailed
	// ProbeRefused: nothing listens; the worker is down at once.
	ProbeRefused
)

// Transition is a change of a worker's health that a report caused.
type Transition uint8

const (
	NoChange Transition = iota
	WentDown
	CameUp
)

// Probe is a worker whose health endpoint is due for a probe.
type Probe struct {
	Worker string
	URL    string // the worker's base URL, as registered
}

// Health is a worker's health as the views show it.
type Health struct {
	Down bool
	// Since is when the worker went down or last came back; zero when it
	// never changed.
	Since time.Time
	// Failures counts consecutive failed probes and refused connections.
	Failures int
	// Reason is why it is down.
	Reason string
	// NextProbe is when it is probed next; zero while none is scheduled.
	NextProbe time.Time
}

// health is an entry's health; guarded by Router.hmu, but for the down
// flag the decisions read (entry.down).
type health struct {
	since    time.Time
	failures int
	reason   string
	backoff  time.Duration
	next     time.Time
	// suspect asks for a probe although up workers are not probed.
	suspect bool
}

func (c *HealthConfig) backoff() time.Duration {
	if c.Backoff > 0 {
		return c.Backoff
	}
	return DefaultBackoff
}

func (c *HealthConfig) maxBackoff() time.Duration {
	return max(c.backoff(), cmp.Or(c.MaxBackoff, DefaultMaxBackoff))
}

// ProbesDue returns the workers whose health endpoint should be probed at
// now, sorted by id. A probe in flight is the caller's to track: a worker
// stays due until its result is reported.
func (r *Router) ProbesDue(now time.Time) []Probe {
	r.mu.RLock()
	defer r.mu.RUnlock()
	r.hmu.Lock()
	defer r.hmu.Unlock()
	var out []Probe
	for id, e := range r.workers {
		h := &e.h
		if !e.down.Load() && !h.suspect && r.cfg.Health.Interval <= 0 {
			continue
		}
		if !now.Before(h.next) {
			out = append(out, Probe{Worker: id, URL: e.w.URL})
		}
	}
	slices.SortFunc(out, func(a, b Probe) int { return strings.Compare(a.Worker, b.Worker) })
	return out
}

// ReportProbe records the outcome of a probe of worker id's health endpoint
// at url; reason says what failed. A report about another URL than the
// worker's (it registered anew meanwhile) changes nothing.
func (r *Router) ReportProbe(id, url string, o ProbeOutcome, reason string, now time.Time) Transition {
	return r.report(id, url, now, func(e *entry, h *health) Transition {
		cfg := &r.cfg.Health
		h.suspect = false
		if o == ProbeOK {
			h.failures, h.next = 0, now.Add(cfg.Interval)
			if e.down.Load() {
				h.since, h.reason = now, ""
				return CameUp
			}
			return NoChange
		}
		h.failures++
		if e.down.Load() {
			h.backoff = min(2*h.backoff, cfg.maxBackoff())
			h.next = now.Add(h.backoff)
			return NoChange
		}
		if o == ProbeRefused || h.failures >= max(cfg.DownAfter, 1) {
			r.markDown(h, reason, now)
			return WentDown
		}
		// Confirmed soon rather than an interval later.
		h.next = now.Add(cfg.backoff())
		return NoChange
	})
}

// ReportRefused records that worker id at url refused a connection: nothing
// listens there, so it is down at once.
func (r *Router) ReportRefused(id, url, reason string, now time.Time) Transition {
	return r.report(id, url, now, func(e *entry, h *health) Transition {
		h.failures++
		if e.down.Load() {
			return NoChange
		}
		r.markDown(h, reason, now)
		return WentDown
	})
}

// ReportSuspect asks for a probe of worker id at url as soon as possible: a
// request to it broke off, which a dying engine does, but so does a
// client or a proxy.
func (r *Router) ReportSuspect(id, url string, now time.Time) {
	r.report(id, url, now, func(e *entry, h *health) Transition {
		if !e.down.Load() && !h.suspect {
			h.suspect, h.next = true, now
		}
		return NoChange
	})
}

// markDown sets h down from now. Callers hold hmu; the caller of report
// flips the entry's flag.
func (r *Router) markDown(h *health, reason string, now time.Time) {
	h.since, h.reason, h.suspect = now, reason, false
	h.backoff = r.cfg.Health.backoff()
	h.next = now.Add(h.backoff)
}

// report applies f to the health of worker id at url, and the transition
// it returns to the worker's down flag.
func (r *Router) report(id, url string, now time.Time, f func(*entry, *health) Transition) Transition {
	r.mu.RLock()
	e := r.workers[id]
	if e == nil || e.w.URL != url {
		r.mu.RUnlock()
		return NoChange
	}
	r.hmu.Lock()
	t := f(e, &e.h)
	switch t {
	case WentDown:
		e.down.Store(true)
		r.down.Add(1)
	case CameUp:
		e.down.Store(false)
		r.down.Add(-1)
	}
	r.hmu.Unlock()
	r.mu.RUnlock()
	if t == WentDown {
		r.mu.Lock()
		if e := r.workers[id]; e != nil && e.down.Load() {
			// Its engine's figures stopped when it did: kept, they
			// would price the worker on a load it no longer has.
			r.forgetEngine(e)
		}
		r.mu.Unlock()
	}
	return t
}

// Down reports whether worker id is marked down.
func (r *Router) Down(id string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e := r.workers[id]
	return e != nil && e.down.Load()
}

// healthOf returns e's health for the views. Callers hold mu.
func (r *Router) healthOf(e *entry) Health {
	r.hmu.Lock()
	defer r.hmu.Unlock()
	h := Health{Down: e.down.Load(), Since: e.h.since, Failures: e.h.failures, Reason: e.h.reason}
	if h.Down || e.h.suspect || r.cfg.Health.Interval > 0 {
		h.NextProbe = e.h.next
	}
	return h
}

// resetHealth makes e a fresh, up worker. Callers hold mu for writing.
func (r *Router) resetHealth(e *entry) {
	if e.down.Swap(false) {
		r.down.Add(-1)
	}
	r.hmu.Lock()
	e.h = health{}
	r.hmu.Unlock()
}
