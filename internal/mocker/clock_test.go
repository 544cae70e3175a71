package mocker

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// stepClock hands every wait to the test, which sees the exact simulated
// duration the engine asked for and decides when it elapses.
type stepClock struct {
	waits chan wait
}

type wait struct {
	d  time.Duration
	ch chan time.Time
}

func (c *stepClock) Now() time.Time { return time.Unix(1700000000, 0) }

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
			done := make(chan completion, 1)
			body := jsonBody(t, map[string]any{"prompt": prompt, "max_tokens": 2})
			go func() {
				var out completion
				if resp, err := http.Post(e.URL()+pathCompletions, contentJSON, body); err == nil {
					_ = json.NewDecoder(resp.Body).Decode(&out)
					resp.Body.Close()
				}
				done <- out
			}()
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
