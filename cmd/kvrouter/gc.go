// This file holds --gc-percent: the router's garbage-collector target and why it is 400.

package main

import (
	"fmt"
	"os"
	"runtime/debug"

	"github.com/spf13/pflag"
)

// defaultGCPercent is the router's garbage-collector target. Most of its
// heap is the inventory index, long-lived and, in its tables, free of
// pointers, so a collection costs little to mark; what costs is how often
// one runs while requests allocate. 400 lets the heap grow to five times
// the live data between collections (Go's default, 100, to twice) and took
// about a tenth off the router's CPU per request in `kvrouter bench router`.
const defaultGCPercent = 400

// gcFlag registers --gc-percent on f.
func gcFlag(f *pflag.FlagSet) *int {
	p := new(int)
	f.IntVar(p, "gc-percent", defaultGCPercent,
		"garbage collector target, as GOGC: the heap may grow to (1 + this/100) × the live data between collections; "+
			"lower it to trade CPU for memory; the GOGC environment variable, when set, wins")
	return p
}

// applyGC sets the collector target unless GOGC is set.
func applyGC(percent int) error {
	if os.Getenv("GOGC") != "" {
		return nil
	}
	if percent <= 0 {
		return fmt.Errorf("--gc-percent %d: want a positive percentage (GOGC=off turns collection off)", percent)
	}
	debug.SetGCPercent(percent)
	return nil
}
