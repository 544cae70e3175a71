// This file holds the measure of host stalls: how often a busy thread loses its CPU.

package indexbench

import (
	"runtime"
	"slices"
	"time"
)

// stallGap is the shortest clock gap a spinning thread counts as a stall:
// well above the clock's own cost (about 60 ns here).
const stallGap = 2 * time.Microsecond

// Stalls is how often the host takes the CPU away from a busy thread.
// On a virtual machine this sets a floor under tail latencies that no
// code can lower: a match of T µs overlaps a stall with probability about
// T × PerSecond / 10^6, and then takes the stall's length longer. (On
// the 2-vCPU development VM: about 1,000 stalls per second of 10–13 µs,
// the host's timer tick, and some longer ones; a C loop sees the same.)
type Stalls struct {
	PerSecond float64 // gaps above stallGap per second of spinning
	MedianUs  float64 // their median length
	Stalled   float64 // fraction of the spin lost to them
}

// MeasureStalls spins on one locked OS thread for d, reading the clock,
// and reports the gaps longer than stallGap.
func MeasureStalls(d time.Duration) Stalls {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var gaps []time.Duration
	start := time.Now()
	last := start
	for {
		now := time.Now()
		if g := now.Sub(last); g > stallGap {
			gaps = append(gaps, g)
		}
		last = now
		if now.Sub(start) >= d {
			break
		}
	}
	return stallsOf(gaps, last.Sub(start))
}

// stallsOf summarises the gaps a spin of length elapsed saw.
func stallsOf(gaps []time.Duration, elapsed time.Duration) Stalls {
	if len(gaps) == 0 || elapsed <= 0 {
		return Stalls{}
	}
	var lost time.Duration
	for _, g := range gaps {
		lost += g
	}
	slices.Sort(gaps)
	return Stalls{
		PerSecond: float64(len(gaps)) / elapsed.Seconds(),
		MedianUs:  float64(gaps[len(gaps)/2]) / float64(time.Microsecond),
		Stalled:   float64(lost) / float64(elapsed),
	}
}
