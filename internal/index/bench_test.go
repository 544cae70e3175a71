package index_test

import (
	"sync"
	"testing"

	"kvrouter/internal/index"
	"kvrouter/internal/index/indexbench"
)

// benchWorkload is smaller than `kvrouter bench index` (200,000 blocks) so
// that a benchmark run stays short; the sharing pattern is the same.
var benchWorkload = sync.OnceValues(func() (*indexbench.Workload, error) {
	return indexbench.Generate(indexbench.Config{Sources: 1000, Blocks: 200_000, PromptBlocks: 128, Seed: 1})
})

var benchIndex = sync.OnceValues(func() (*index.Index, error) {
	w, err := benchWorkload()
	if err != nil {
		return nil, err
	}
	return w.Build(0)
})

func BenchmarkApply(b *testing.B) {
	w, err := benchWorkload()
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		ix, err := index.New(index.Config{BlockSize: 16})
		if err != nil {
			b.Fatal(err)
		}
		if err := w.Apply(ix); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(w.BlockEvents)*float64(b.N)/b.Elapsed().Seconds(), "blocks/s")
}

func benchMatch(b *testing.B, prompts func(*indexbench.Workload) [][]uint64) {
	w, err := benchWorkload()
	if err != nil {
		b.Fatal(err)
	}
	ix, err := benchIndex()
	if err != nil {
		b.Fatal(err)
	}
	ps := prompts(w)
	var out index.Matches
	i := 0
	for b.Loop() {
		ix.MatchInto(&out, ps[i%len(ps)], index.MatchOptions{Chains: true})
		i++
	}
}

// BenchmarkMatch16 matches conversation prompts: at most 16 sources share
// any prefix.
func BenchmarkMatch16(b *testing.B) {
	benchMatch(b, func(w *indexbench.Workload) [][]uint64 { return w.Convs })
}

// BenchmarkMatchAll matches hot prompts: all 1,000 sources hold a prefix.
func BenchmarkMatchAll(b *testing.B) {
	benchMatch(b, func(w *indexbench.Workload) [][]uint64 { return w.Hot })
}

// BenchmarkMatch16Warm matches one conversation prompt over and over: its
// nodes stay in cache, so this is the walk's compute alone.
func BenchmarkMatch16Warm(b *testing.B) {
	benchMatch(b, func(w *indexbench.Workload) [][]uint64 { return w.Convs[:1] })
}
