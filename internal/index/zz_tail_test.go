package index_test

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"kvrouter/internal/index"
	"kvrouter/internal/index/indexbench"
)

func threadCPU() time.Duration {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 3 /*CLOCK_THREAD_CPUTIME_ID*/, uintptr(unsafe.Pointer(&ts)), 0)
	return time.Duration(ts.Nano())
}

func TestZZTail(t *testing.T) {
	if os.Getenv("ZZTAIL") == "" {
		t.Skip()
	}
	w, _ := indexbench.Generate(indexbench.Config{Sources: 1000, Blocks: 1_000_000, PromptBlocks: 128, Seed: 1})
	ix, _ := w.Build(0)
	w.Ops = nil
	runtime.GC()
	runtime.LockOSThread()
	var out []index.Match
	n := 20000
	wall := make([]time.Duration, n)
	cpu := make([]time.Duration, n)
	for i := range n {
		q := w.Convs[(i*7919)%len(w.Convs)]
		if os.Getenv("ZZWARM") != "" {
			out = ix.AppendMatch(out[:0], q, index.MatchOptions{Chains: true})
		}
		c0 := threadCPU()
		t0 := time.Now()
		out = ix.AppendMatch(out[:0], q, index.MatchOptions{Chains: os.Getenv("ZZNOCHAIN") == ""})
		wall[i] = time.Since(t0)
		cpu[i] = threadCPU() - c0
	}
	slices.Sort(wall)
	slices.Sort(cpu)
	for _, p := range []float64{0.5, 0.9, 0.99, 0.999} {
		k := int(p * float64(n))
		fmt.Printf("p%v wall %v cpu %v\n", p*100, wall[k], cpu[k])
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Println("numgc", ms.NumGC)
}
