package tokenizer

import (
	"runtime"
	"syscall"
	"testing"
	"time"
)

// threadCPU returns the CPU time the calling thread has used.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loopCPU runs f b.N times on one locked thread and reports its CPU time
// per call as cpu-ns/op besides the wall time: on a shared machine the
// wall time counts the waits for a core.
func loopCPU(b *testing.B, f func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := threadCPU()
	n := 0
	for b.Loop() {
		f()
		n++
	}
	b.ReportMetric(float64(threadCPU()-start)/float64(n), "cpu-ns/op")
}
