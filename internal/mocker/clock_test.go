package mocker

import (
	"sync/atomic"
	"testing"
	"time"
)

// stepClock hands every wait to the test, which sees the exact simulated
// duration the engine asked for and decides when it elapses. With a tick,
// every reading of Now is tick later than the one before: real work
// between two readings takes at least a tick.
type stepClock struct {
	waits chan wait
	tick  time.Duration
	reads atomic.Int64
}

type wait struct {
	d  time.Duration
	ch chan time.Time
}

func (c *stepClock) Now() time.Time {
	return time.Unix(1700000000, 0).Add(time.Duration(c.reads.Add(1)) * c.tick)
}

func (c *stepClock) After(d time.Duration) <-chan time.Time {
	w := wait{d: d, ch: make(chan time.Time, 1)}
	c.waits <- w
	return w.ch
}

// TestStepTiming: each engine step waits exactly its simulated cost (a
// base step cost plus the prompt tokens it computes, divided by the
// speedup), and tokens reach the client only once that wait is over.
func TestStepTiming(t *testing.T) {
	clock := &stepClock{waits: make(chan wait)}
	e := startEngine(t, func(c *Config) {
		c.Clock, c.Speedup = clock, 2
		c.PrefillPerToken, c.DecodePerToken, c.RestorePerToken = 100*time.Microsecond, 10*time.Millisecond, 0
	})
	prompt := make([]int, 100)
	for i := range prompt {
		prompt[i] = i + 1
	}
	cases := []struct {
		name  string
		waits []time.Duration
	}{
		// 100 prompt tokens in one step, then one decode step.
		{"cold", []time.Duration{(10*time.Millisecond + 100*100*time.Microsecond) / 2, 10 * time.Millisecond / 2}},
		// The first block is cached: 36 tokens left to compute.
		{"prefix cached", []time.Duration{(10*time.Millisecond + 36*100*time.Microsecond) / 2, 10 * time.Millisecond / 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			done := postAsync(t, e, map[string]any{"prompt": prompt, "max_tokens": 2})
			for i, want := range c.waits {
				w := <-clock.waits
				if w.d != want {
					t.Fatalf("step %d waits %v, want %v", i, w.d, want)
				}
				select {
				case <-done:
					t.Fatal("answered before the step's time elapsed")
				default:
				}
				w.ch <- clock.Now()
			}
			if got := <-done; got.Usage.CompletionTokens != 2 {
				t.Fatalf("usage %+v", got.Usage)
			}
		})
	}
}

// TestStepTimingCountsRealWork: the real work of a step (filling and
// hashing KV bytes) is part of its simulated time, not added to it; a step
// whose work outlasts its simulated time does not wait at all.
func TestStepTimingCountsRealWork(t *testing.T) {
	prompt := make([]int, 100)
	for i := range prompt {
		prompt[i] = i + 1
	}
	const tick = time.Millisecond
	// Simulated costs halved by the speedup; the engine reads the clock
	// around each step, the request handler once more at any moment.
	cases := []struct {
		name string
		tick time.Duration
		cold time.Duration // the cold step's simulated wait
	}{
		{"work within the step", tick, (10*time.Millisecond + 100*100*time.Microsecond) / 2},
		{"work beyond the step", time.Hour, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clock := &stepClock{waits: make(chan wait), tick: c.tick}
			e := startEngine(t, func(cfg *Config) {
				cfg.Clock, cfg.Speedup = clock, 2
				cfg.PrefillPerToken, cfg.DecodePerToken, cfg.RestorePerToken = 100*time.Microsecond, 10*time.Millisecond, 0
			})
			done := postAsync(t, e, map[string]any{"prompt": prompt, "max_tokens": 2})
			if c.cold > 0 {
				for i, sim := range []time.Duration{c.cold, 10 * time.Millisecond / 2} {
					w := <-clock.waits
					if w.d >= sim || w.d < sim-4*tick {
						t.Fatalf("step %d waits %v, want %v less the clock's ticks during the step", i, w.d, sim)
					}
					w.ch <- clock.Now()
				}
			}
			select {
			case got := <-done:
				if got.Usage.CompletionTokens != 2 {
					t.Fatalf("usage %+v", got.Usage)
				}
			case w := <-clock.waits:
				t.Fatalf("a step waited %v after its work", w.d)
			}
		})
	}
}
