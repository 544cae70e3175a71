package runnerprobe

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"kvrouter/internal/ingest"
	"kvrouter/internal/runner"
)

func TestRunnerWatch(t *testing.T) {
	w := Watch{TTL: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	down := fmt.Errorf("dial: %w", net.ErrClosed)
	busy := fmt.Errorf("refused: %w", runner.ErrPeerBusy)
	for i, st := range []struct {
		epoch uint64
		err   error
		at    time.Duration
		want  string
	}{
		{7, nil, 0, "up 7"},
		{7, nil, time.Second, "up 7"},  // every answer: the core needs one after each engine signal
		{0, busy, 2 * time.Second, ""}, // alive, epoch unsaid
		{0, down, 3 * time.Second, "down"},
		{0, down, 12 * time.Second, ""},
		{0, down, 13 * time.Second, "expired"},
		{0, down, 14 * time.Second, ""},
		{8, nil, 15 * time.Second, "up 8"},
		{0, down, 16 * time.Second, "down"},
	} {
		rep, send := w.Observe(st.epoch, st.err, t0.Add(st.at))
		got := ""
		if send {
			got = stateName(rep)
		}
		if got != st.want {
			t.Fatalf("step %d: %q, want %q", i, got, st.want)
		}
	}
}

// Run reports every target's results with its TP rank, a silent runner
// down and then expired past the TTL, until ctx ends.
func TestRun(t *testing.T) {
	ping := func(_ context.Context, ep string, _ time.Duration) (uint64, error) {
		if ep == "up" {
			return 7, nil
		}
		return 0, fmt.Errorf("dial %s: %w", ep, net.ErrClosed)
	}
	ctx, cancel := context.WithCancel(context.Background())
	reports := make(chan string, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		cfg := Config{Interval: 5 * time.Millisecond, TTL: 30 * time.Millisecond, Ping: ping, Log: slog.New(slog.DiscardHandler)}
		Run(ctx, cfg, []Target{{DP: 0, TP: 1, Endpoint: "up"}, {DP: 2, TP: 0, Endpoint: "down"}}, func(tg Target, r ingest.Runner) {
			reports <- fmt.Sprintf("%d/%d %s", tg.DP, r.TP, stateName(r))
		})
	}()
	want := map[string]bool{"0/1 up 7": false, "2/0 down": false, "2/0 expired": false}
	for missing := len(want); missing > 0; {
		select {
		case r := <-reports:
			seen, ok := want[r]
			if !ok {
				t.Fatalf("report %q", r)
			}
			if !seen {
				want[r] = true
				missing--
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("reports so far: %v", want)
		}
	}
	cancel()
	<-done
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{Interval: time.Second, TTL: time.Minute}, ""},
		{Config{}, ""},
		{Config{Interval: -1}, "--runner-probe"},
		{Config{Interval: time.Second, TTL: time.Millisecond}, "--owner-ttl"},
	} {
		err := tc.c.Check()
		if got := ""; err != nil {
			got = err.Error()
			if tc.want == "" || !strings.HasPrefix(got, tc.want) {
				t.Errorf("%+v: %v, want %q", tc.c, err, tc.want)
			}
		} else if tc.want != "" {
			t.Errorf("%+v: no error, want %q", tc.c, tc.want)
		}
	}
}

func stateName(r ingest.Runner) string {
	s := [...]string{ingest.RunnerUp: "up", ingest.RunnerDown: "down", ingest.RunnerExpired: "expired"}[r.State]
	if r.State == ingest.RunnerUp {
		s += fmt.Sprintf(" %d", r.Epoch)
	}
	return s
}
