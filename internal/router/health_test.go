package router

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"kvrouter/internal/cost"
	"kvrouter/internal/hints"
	"kvrouter/internal/index"
	"kvrouter/internal/kvevents"
)

const (
	probeEvery = 2 * time.Second
	backoff    = 250 * time.Millisecond
	maxBackoff = time.Second
)

func healthRouter(t *testing.T, interval time.Duration) *Router {
	return newRouter(t, func(c *Config) {
		c.Health = HealthConfig{Interval: interval, DownAfter: 2, Backoff: backoff, MaxBackoff: maxBackoff}
	})
}

// step is one event fed to the health state machine, at an offset from t0.
type step struct {
	at      time.Duration
	probe   *ProbeOutcome // else a refused request, or with suspect a suspicion
	suspect bool
	want    Transition
	down    bool
	next    time.Duration // the next probe's offset; -1: none scheduled
}

func outcome(o ProbeOutcome) *ProbeOutcome { return &o }

// TestHealthStateMachine: refused connections mark a worker down at once,
// failed probes after DownAfter of them; a down worker is probed with
// doubling back-off and comes back at its first answer.
func TestHealthStateMachine(t *testing.T) {
	ok, failed, refused := outcome(ProbeOK), outcome(ProbeFailed), outcome(ProbeRefused)
	tests := []struct {
		name     string
		interval time.Duration
		steps    []step
	}{
		{"a refused request marks it down; probes back off and bring it back", probeEvery, []step{
			{at: 0, want: WentDown, down: true, next: backoff},
			{at: backoff, probe: refused, down: true, next: backoff + 2*backoff},
			{at: 3 * backoff, probe: failed, down: true, next: 3*backoff + 4*backoff},
			{at: 7 * backoff, probe: failed, down: true, next: 7*backoff + maxBackoff},
			{at: 7*backoff + maxBackoff, probe: refused, down: true, next: 7*backoff + 2*maxBackoff},
			{at: 7*backoff + 2*maxBackoff, probe: ok, want: CameUp, next: 7*backoff + 2*maxBackoff + probeEvery},
		}},
		{"one failed probe is confirmed soon; two mark it down", probeEvery, []step{
			{at: 0, probe: ok, next: probeEvery},
			{at: probeEvery, probe: failed, next: probeEvery + backoff},
			{at: probeEvery + backoff, probe: failed, want: WentDown, down: true, next: probeEvery + 2*backoff},
			{at: probeEvery + 2*backoff, probe: ok, want: CameUp, next: 2*probeEvery + 2*backoff},
		}},
		{"an answer between failures resets the count", probeEvery, []step{
			{at: 0, probe: failed, next: backoff},
			{at: backoff, probe: ok, next: backoff + probeEvery},
			{at: backoff + probeEvery, probe: failed, next: 2*backoff + probeEvery},
		}},
		{"a refused probe marks it down at once", probeEvery, []step{
			{at: 0, probe: refused, want: WentDown, down: true, next: backoff},
		}},
		{"a second refusal of a down worker changes nothing", probeEvery, []step{
			{at: 0, want: WentDown, down: true, next: backoff},
			{at: 10 * time.Millisecond, down: true, next: backoff},
		}},
		{"without periodic probes only down and suspect workers are probed", 0, []step{
			{at: 0, suspect: true, next: 0},
			{at: time.Millisecond, probe: ok, next: -1},
			{at: time.Second, want: WentDown, down: true, next: time.Second + backoff},
			{at: time.Second + backoff, probe: ok, want: CameUp, next: -1},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := healthRouter(t, tc.interval)
			newFleet(t, r, agg("a", 1), agg("b", 1))
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				var got Transition
				switch {
				case s.probe != nil:
					got = r.ReportProbe("a", "http://a", *s.probe, "probe", now)
				case s.suspect:
					r.ReportSuspect("a", "http://a", now)
				default:
					got = r.ReportRefused("a", "http://a", "refused", now)
				}
				if got != s.want || r.Down("a") != s.down {
					t.Fatalf("step %d: transition %v down %v, want %v %v", i, got, r.Down("a"), s.want, s.down)
				}
				ws, _ := r.View()
				h := ws[0].Health
				if s.next < 0 {
					if !h.NextProbe.IsZero() {
						t.Fatalf("step %d: next probe %v, want none", i, h.NextProbe.Sub(t0))
					}
				} else if !h.NextProbe.Equal(t0.Add(s.next)) {
					t.Fatalf("step %d: next probe at %v, want %v", i, h.NextProbe.Sub(t0), s.next)
				}
				due := slices.ContainsFunc(r.ProbesDue(t0.Add(s.next)), func(p Probe) bool { return p.Worker == "a" })
				if want := s.next >= 0; due != want {
					t.Fatalf("step %d: due at its next probe %v, want %v", i, due, want)
				}
			}
		})
	}
}

// TestHealthReportsForAnotherURL: a report about the address a worker had
// before it registered anew changes nothing, and a new address starts
// healthy.
func TestHealthReportsForAnotherURL(t *testing.T) {
	r := healthRouter(t, probeEvery)
	newFleet(t, r, agg("a", 1))
	if tr := r.ReportRefused("a", "http://elsewhere", "refused", t0); tr != NoChange || r.Down("a") {
		t.Fatalf("report for another url: %v", tr)
	}
	r.ReportRefused("a", "http://a", "refused", t0)
	w := agg("a", 1)
	w.URL = "http://a-moved"
	if err := r.Upsert(w, t0); err != nil {
		t.Fatal(err)
	}
	if r.Down("a") || r.Stats().WorkersDown != 0 {
		t.Fatal("a new address is still down")
	}
	if err := r.Upsert(w, t0); err != nil { // a lease refresh keeps what was found
		t.Fatal(err)
	}
	r.ReportRefused("a", "http://a-moved", "refused", t0)
	if err := r.Upsert(w, t0); err != nil {
		t.Fatal(err)
	}
	if !r.Down("a") {
		t.Fatal("a lease refresh brought a down worker back")
	}
	r.Remove("a", t0)
	if st := r.Stats(); st.WorkersDown != 0 {
		t.Fatalf("a removed worker still counts as down: %+v", st)
	}
}

// TestDownWorkerIsNotChosen: a down worker is out of every decision (but a
// forced one), whatever it holds, and back in once up.
func TestDownWorkerIsNotChosen(t *testing.T) {
	prompt := tokens(100, 8)
	for _, routing := range []string{"kv", "kv-explain", "round-robin", "least-loaded"} {
		t.Run(routing, func(t *testing.T) {
			r := newRouter(t, func(c *Config) {
				if routing != "kv-explain" {
					c.Routing = cost.Routing(routing)
				}
			})
			f := newFleet(t, r, agg("a", 1), agg("b", 2))
			f.store("b", index.WorkerRank("b", 0), storeOp(prompt[:6*bs], "", kvevents.TierDevice))
			f.store("b", index.WorkerRank("b", 1), storeOp(prompt[:6*bs], "", kvevents.TierDevice))
			r.ReportRefused("b", "http://b", "refused", t0)
			req := Request{Model: "m", Tokens: prompt, Explain: routing == "kv-explain"}
			for i := range 20 {
				req.Tokens = append(tokens(100, 8), uint32(i))
				if d := decide(t, r, req); d.Target.Worker.ID != "a" {
					t.Fatalf("chose down worker %s", target(d))
				}
			}
			if d := decide(t, r, Request{Model: "m", Tokens: prompt, Target: "b"}); d.Target.Worker.ID != "b" {
				t.Fatalf("forced onto b: got %s", target(d))
			}
			r.ReportRefused("a", "http://a", "refused", t0)
			_, err := r.Decide(Request{Model: "m", Tokens: prompt})
			if !errors.Is(err, ErrNoWorker) || !strings.Contains(err.Error(), "down") {
				t.Fatalf("all down: %v", err)
			}
			r.ReportProbe("b", "http://b", ProbeOK, "", t0)
			if routing == "kv" {
				if d := decide(t, r, Request{Model: "m", Tokens: prompt}); d.Target.Worker.ID != "b" {
					t.Fatalf("b is back with the prefix, got %s", target(d))
				}
			}
		})
	}
}

// TestDownWorkerNamesNoHintSource: a down worker's device blocks are no
// hint source, while its cache owner's (runner-owned) blocks stay one.
func TestDownWorkerNamesNoHintSource(t *testing.T) {
	prompt := tokens(100, 8)
	r := newRouter(t, nil)
	f := newFleet(t, r, agg("a", 1), agg("b", 1), agg("c", 1))
	f.store("b", index.WorkerRank("b", 0), storeOp(prompt[:6*bs], "", kvevents.TierDevice))
	hintFrom := func() (string, hints.Reason) {
		d := decide(t, r, Request{Model: "m", Tokens: prompt, Target: "a"})
		return d.HintDecision.Source.String(), d.HintDecision.Reason
	}
	if src, why := hintFrom(); why != hints.ReasonHinted || src != "b/0" {
		t.Fatalf("up: hint from %s (%v)", src, why)
	}
	r.ReportRefused("b", "http://b", "refused", t0)
	if src, why := hintFrom(); why == hints.ReasonHinted {
		t.Fatalf("down: hint from %s", src)
	}
	f.store("c", index.WorkerRank("c", 0), storeOp(prompt[:3*bs], "", kvevents.TierDevice))
	if src, why := hintFrom(); why != hints.ReasonHinted || src != "c/0" {
		t.Fatalf("down b, shallower c: hint from %s (%v)", src, why)
	}
	f.store("b", index.CacheOwner("owner-b-0"), storeOp(prompt[:7*bs], "", kvevents.TierExternal))
	if src, why := hintFrom(); why != hints.ReasonHinted || src != "owner:owner-b-0" {
		t.Fatalf("down b's runner-owned blocks: hint from %s (%v)", src, why)
	}
	ws, _ := r.View()
	if !ws[1].Health.Down || ws[1].Ranks[0].Ready || ws[1].Owners[0].ID != "owner-b-0" || !ws[1].Owners[0].Ready {
		t.Fatalf("view of b: %+v", ws[1])
	}
	if st := r.Stats(); st.WorkersDown != 1 || st.NotReady != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestDownWorkerForgetsEngineLoad: the engine figures of a worker that
// went down are dropped, not kept frozen.
func TestDownWorkerForgetsEngineLoad(t *testing.T) {
	r := newRouter(t, nil)
	newFleet(t, r, agg("a", 2))
	r.SetEngineLoad("a", 0, EngineLoad{Running: 3})
	r.SetEngineLoad("a", 1, EngineLoad{Running: 4})
	engine := func() (n int) {
		ws, _ := r.View()
		for _, rv := range ws[0].Ranks {
			if rv.Engine != nil {
				n++
			}
		}
		return n
	}
	if engine() != 2 {
		t.Fatal("engine loads not recorded")
	}
	r.ReportRefused("a", "http://a", "refused", t0)
	if n := engine(); n != 0 {
		t.Fatalf("%d ranks keep their engine load after going down", n)
	}
	// A scrape answered before the worker went down and applied after.
	r.SetEngineLoad("a", 0, EngineLoad{Running: 5})
	if n := engine(); n != 0 {
		t.Fatalf("a down worker took %d ranks' engine load", n)
	}
	r.ReportProbe("a", "http://a", ProbeOK, "", t0)
	r.SetEngineLoad("a", 0, EngineLoad{Running: 3})
	r.ClearEngineLoad("a")
	if n := engine(); n != 0 {
		t.Fatalf("%d ranks keep their engine load after clearing", n)
	}
}
