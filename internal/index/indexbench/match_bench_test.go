package indexbench

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"kvrouter/internal/index"
)

// fullIndex is `kvrouter bench index`'s workload, applied: a second or two
// to build, so only benchmarks ask for it.
var fullIndex = sync.OnceValues(func() (*Workload, *index.Index) {
	w, err := Generate(Config{Sources: 1000, Blocks: 1_000_000, PromptBlocks: 128, Seed: 1})
	if err != nil {
		panic(err)
	}
	ix, err := index.New(index.Config{BlockSize: 16})
	if err != nil {
		panic(err)
	}
	if err := w.Apply(ix); err != nil {
		panic(err)
	}
	w.Drop()
	return w, ix
})

// BenchmarkMatch16Cold matches random conversation prompts against the full
// workload's index, whose nodes are out of cache (~100 MiB of node store and
// directories), and reports the mean match alone (match-ns), without
// choosing the prompt.
// The prompts' hashes are read cold as well.
func BenchmarkMatch16Cold(b *testing.B) {
	w, ix := fullIndex()
	r := rand.New(rand.NewPCG(1, 99))
	var out index.Matches
	var total time.Duration
	for b.Loop() {
		q := w.Convs[r.IntN(len(w.Convs))]
		start := time.Now()
		ix.MatchInto(&out, q, index.MatchOptions{Chains: true})
		total += time.Since(start)
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "match-ns")
}
