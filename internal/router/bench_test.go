package router

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"kvrouter/internal/cost"
	"kvrouter/internal/index"
	"kvrouter/internal/kvevents"
)

// BenchmarkDecide: 1,000 worker ranks (500 workers of 2 DP ranks, each
// with a cache owner per rank) sharing a 32-block system prompt, each rank
// holding 8 conversations of 48 blocks; the request is a conversation
// continued by 16 new blocks, with 200 requests in flight.
func BenchmarkDecide(b *testing.B) { benchDecide(b, 1) }

// BenchmarkDecideSystems8 is BenchmarkDecide with 8 system prompts, each
// shared by an eighth of the ranks: most ranks hold nothing of a request.
func BenchmarkDecideSystems8(b *testing.B) { benchDecide(b, 8) }

func benchDecide(b *testing.B, systems int) {
	const (
		workers = 500
		ranks   = 2
		system  = 32
		convs   = 8
		conv    = 48
	)
	r := newRouter(b, nil)
	f := newFleet(b, r)
	sysOf := func(w, rank int) []uint32 { return tokens(1<<30+uint32((w*ranks+rank)%systems)<<16, system) }
	for w := range workers {
		f.add(agg(fmt.Sprint("w", w), ranks))
	}
	for w := range workers {
		id := fmt.Sprint("w", w)
		for rank := range ranks {
			src := index.WorkerRank(id, rank)
			sys := sysOf(w, rank)
			f.store(id, src, storeOp(sys, "", kvevents.TierDevice))
			for c := range convs {
				p := append(append([]uint32(nil), sys...), tokens(uint32((w*ranks+rank)*convs+c)<<12, conv)...)
				op := storeOp(p, "", kvevents.TierDevice)
				op.Hashes, op.Local, op.Parent, op.HasParent = op.Hashes[system:], op.Local[system:], op.Hashes[system-1], true
				f.store(id, src, op)
			}
			// The rank's runner keeps the first conversation.
			own := append(append([]uint32(nil), sys...), tokens(uint32((w*ranks+rank)*convs)<<12, conv)...)
			f.store(id, index.CacheOwner(fmt.Sprintf("owner-%s-%d", id, rank)), storeOp(own, "", kvevents.TierExternal))
		}
	}
	for i := range 200 {
		r.Load().Start(fmt.Sprint("inflight", i), cost.Rank{Worker: fmt.Sprint("w", i%workers), DP: i % ranks}, 64, 8)
	}
	r.RefreshSizes()
	reqs := make([]Request, 64)
	for i := range reqs {
		w, rank := (i*7)%workers, i%ranks
		p := append(append([]uint32(nil), sysOf(w, rank)...), tokens(uint32((w*ranks+rank)*convs+1)<<12, conv)...)
		p = append(p, tokens(uint32(1<<29+i*100000), 16)...)
		reqs[i] = Request{Model: "m", Tokens: p}
	}
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu := time.Now(), processCPU()
	for i := 0; i < b.N; i++ {
		d, err := r.Decide(reqs[i%len(reqs)])
		if err != nil || d.Overlap < system+conv {
			b.Fatalf("decision %v overlap %d", err, d.Overlap)
		}
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N), "µs/op")
	// CPU time, unlike wall time, does not count what other processes on
	// a busy machine take.
	b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
}

// processCPU is the user and system time the process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
