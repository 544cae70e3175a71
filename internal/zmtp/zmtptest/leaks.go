// Package zmtptest holds test support shared by the packages whose tests
// open ZMTP sockets: a check that no goroutine a test started outlives it.
package zmtptest

import (
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// waitLimit is a safety net against hangs, not a timing assertion.
const waitLimit = 10 * time.Second

// CheckLeaks fails t if goroutines started during the test outlive it
// (waiting up to ten seconds for them to end), leaving out those whose
// stack contains one of ignore.
func CheckLeaks(t testing.TB, ignore ...string) {
	t.Helper()
	goroutines := func() map[string]string { return Goroutines(ignore...) }
	before := goroutines()
	t.Cleanup(func() {
		var extra []string
		for deadline := time.Now().Add(waitLimit); ; {
			extra = extra[:0]
			for id, stack := range goroutines() {
				if _, ok := before[id]; !ok {
					extra = append(extra, stack)
				}
			}
			if len(extra) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if len(extra) > 0 {
			t.Errorf("%d goroutines leaked:\n%s", len(extra), strings.Join(extra, "\n\n"))
		}
	})
}

// Goroutines maps goroutine header lines to stacks, leaving out the
// caller's own and those whose stack contains one of ignore.
func Goroutines(ignore ...string) map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := make(map[string]string)
	for i, g := range strings.Split(string(buf), "\n\n") {
		if i == 0 || slices.ContainsFunc(ignore, func(s string) bool { return strings.Contains(g, s) }) {
			continue
		}
		id, _, _ := strings.Cut(g, " [")
		out[id] = g
	}
	return out
}
