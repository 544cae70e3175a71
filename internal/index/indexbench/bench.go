// This file holds one benchmark run: the index built and timed, matches timed, the report.

package indexbench

import (
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"time"

	"kvrouter/internal/index"
)

// Result is what one run measured. The JSON keys are the report's wire
// names.
type Result struct {
	ApplyBlocksPerS     float64 `json:"apply_blocks_per_s"`
	MatchP50us          float64 `json:"match_p50_us"`
	MatchP99us          float64 `json:"match_p99_us"`
	MatchP50usAll       float64 `json:"match_p50_us_all_sources"`
	MatchP99usAll       float64 `json:"match_p99_us_all_sources"`
	BytesPerBlockSource float64 `json:"bytes_per_block_source"`
	Sources             int     `json:"sources"`
	Blocks              int     `json:"blocks"`
	Pairs               int     `json:"pairs"`
	BlockEvents         int     `json:"block_events"`
	HeapBytes           uint64  `json:"heap_bytes"`
	// MappedBytes is the index's memory outside the Go heap (its large
	// tables, on huge pages): counted in BytesPerBlockSource with HeapBytes.
	MappedBytes uint64 `json:"mapped_bytes"`
	Matches     int    `json:"matches"`
	// The host's stalls of a busy thread, measured just before the
	// matches: context for the p99s, which include them.
	HostStallsPerS float64 `json:"host_stalls_per_s"`
	HostStallP50us float64 `json:"host_stall_p50_us"`
}

// Run generates the workload, builds the index on one goroutine timing it,
// weighs the heap it added, then times matches one by one on one
// goroutine: conversation prompts (at most 16 sources share a prefix) and
// hot prompts (every source holds a prefix). Matches ask for chains, as
// hint building does. Latencies are wall clock: on a busy machine they
// include the time other processes take.
func Run(cfg Config, matches int) (Result, error) {
	w, err := Generate(cfg)
	if err != nil {
		return Result{}, err
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	ix, err := index.New(index.Config{BlockSize: 16})
	if err != nil {
		return Result{}, err
	}
	start := time.Now()
	if err := w.Apply(ix); err != nil {
		return Result{}, err
	}
	applyDur := time.Since(start)

	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(w)

	st := ix.Stats()
	res := Result{
		ApplyBlocksPerS: float64(w.BlockEvents) / applyDur.Seconds(),
		Sources:         st.Sources,
		Blocks:          st.Blocks,
		Pairs:           st.Pairs,
		BlockEvents:     w.BlockEvents,
		Matches:         matches,
	}
	if after.HeapAlloc > before.HeapAlloc {
		res.HeapBytes = after.HeapAlloc - before.HeapAlloc
	}
	res.MappedBytes = uint64(st.Mapped)
	if st.Pairs > 0 {
		res.BytesPerBlockSource = float64(res.HeapBytes+res.MappedBytes) / float64(st.Pairs)
	}

	// The op stream is a benchmark artifact: drop it so that matches run
	// against a heap like a router's.
	w.Drop()
	runtime.GC()
	stalls := MeasureStalls(300 * time.Millisecond)
	res.HostStallsPerS, res.HostStallP50us = stalls.PerSecond, stalls.MedianUs
	r := rand.New(rand.NewPCG(cfg.Seed, 99))
	res.MatchP50us, res.MatchP99us = timeMatches(ix, w.Convs, matches, r)
	res.MatchP50usAll, res.MatchP99usAll = timeMatches(ix, w.Hot, max(matches/10, 1), r)
	runtime.KeepAlive(ix)
	return res, nil
}

// timeMatches times n matches of random prompts and returns p50 and p99 in
// microseconds. Each prompt's local hashes are written to a buffer before
// its match, as the router writes them (kvhash.LocalHashes, from the
// request's tokens) just before it matches: a request's hashes are in
// cache, its index nodes are not.
func timeMatches(ix *index.Index, prompts [][]uint64, n int, r *rand.Rand) (p50, p99 float64) {
	if len(prompts) == 0 || n <= 0 {
		return 0, 0
	}
	durs := make([]time.Duration, n)
	var out index.Matches // reused, as the router reuses its own
	var q []uint64
	opts := index.MatchOptions{Chains: true}
	for i := range durs {
		q = append(q[:0], prompts[r.IntN(len(prompts))]...)
		start := time.Now()
		ix.MatchInto(&out, q, opts)
		durs[i] = time.Since(start)
	}
	slices.Sort(durs)
	at := func(p float64) float64 {
		return float64(durs[min(int(p*float64(n)), n-1)]) / float64(time.Microsecond)
	}
	return at(0.50), at(0.99)
}

// WriteTable prints a result for people.
func (r Result) WriteTable(out io.Writer) error {
	_, err := fmt.Fprintf(out, `index benchmark: %d sources, %d blocks, %d (block, source) pairs
  apply               %12.0f block events/s  (%d events, one writer)
  match, <=16 sharing %9.1f µs p50 %9.1f µs p99
  match, all sharing  %9.1f µs p50 %9.1f µs p99
  memory              %12.1f bytes per (block, source) pair  (%d MiB heap, %d MiB mapped)
  host stalls         %12.0f per second, median %.1f µs  (a busy thread's clock gaps over 2 µs:
                      a match that overlaps one takes that much longer, and p99 shows it
                      once more than 1%% of matches do)
`, r.Sources, r.Blocks, r.Pairs, r.ApplyBlocksPerS, r.BlockEvents,
		r.MatchP50us, r.MatchP99us, r.MatchP50usAll, r.MatchP99usAll,
		r.BytesPerBlockSource, r.HeapBytes>>20, r.MappedBytes>>20, r.HostStallsPerS, r.HostStallP50us)
	return err
}
