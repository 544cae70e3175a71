// This file holds the closed-loop load generator and the timing traces it collects.

package servebench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"kvrouter/internal/frontdoor"
)

// phase is what one closed-loop run saw.
type phase struct {
	ok, failed int64
	elapsed    time.Duration
	cpu        time.Duration // the whole process's CPU time
	latency    []time.Duration
	firstErr   error
}

// pathCompletions is where every request goes, router and null engine alike.
const pathCompletions = "/v1/completions"

// run is the closed-loop load generator: conc keep-alive connections to
// addr on loopback (see wire.go), each sending the next of reqs (prepared
// by wireRequest) when the last is answered, for d. Requests in flight
// when d is up are finished, not cancelled, so that every request the
// router forwarded is counted on both sides.
func run(ctx context.Context, addr string, reqs [][]byte, conc int, d time.Duration) phase {
	var (
		next     atomic.Uint64
		ok, bad  atomic.Int64
		mu       sync.Mutex
		lat      []time.Duration
		firstErr error
		wg       sync.WaitGroup
	)
	cpu0 := processCPU()
	start := time.Now()
	end := start.Add(d)
	for range conc {
		wg.Go(func() {
			conn := &wireConn{addr: addr}
			defer conn.close()
			mine := make([]time.Duration, 0, 4096)
			for ctx.Err() == nil && time.Now().Before(end) {
				req := reqs[next.Add(1)%uint64(len(reqs))]
				t := time.Now()
				status, err := conn.post(req)
				if err == nil && status != 200 {
					err = fmt.Errorf("POST http://%s%s: status %d", addr, pathCompletions, status)
				}
				switch {
				case err == nil:
					ok.Add(1)
					mine = append(mine, time.Since(t))
				case ctx.Err() == nil:
					bad.Add(1)
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return phase{ok: ok.Load(), failed: bad.Load(), elapsed: time.Since(start), cpu: processCPU() - cpu0,
		latency: lat, firstErr: firstErr}
}

// traces collects the front door's timing of the requests it sent while on.
type traces struct {
	on bool // set before the measured phase starts, read after it ends
	mu sync.Mutex
	t  []frontdoor.Timing
}

func (tr *traces) add(t frontdoor.Timing) {
	tr.mu.Lock()
	if tr.on {
		tr.t = append(tr.t, t)
	}
	tr.mu.Unlock()
}

func (tr *traces) set(on bool) []frontdoor.Timing {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.on = on
	out := tr.t
	tr.t = nil
	return out
}

// quantile returns the q-quantile of ds (sorted in place), 0 when empty.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// processCPU is the user and system CPU time the process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rssMB is the process's resident set (VmRSS), 0 where /proc is missing.
func rssMB() float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			if err == nil {
				return kb / 1024
			}
		}
	}
	return 0
}
