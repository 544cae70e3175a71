// This file holds the progress bar a run redraws on a terminal with \r: done, rate, time left.

package loadgen

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

const barWidth = 30

// Progress returns a progress callback for Driver.Run that redraws one
// line on w with \r: a bar, done/total, the completion rate and the time
// left at that rate, and ends the line when done reaches total. It draws
// the empty bar at once. With tty false (w is a file or a pipe, where \r
// would leave a line per update) it writes nothing; the caller prints its
// summary either way. A nil clock means SystemClock.
func Progress(w io.Writer, total int, tty bool, clock Clock) func(done, total int) {
	if !tty {
		return func(int, int) {}
	}
	if clock == nil {
		clock = SystemClock{}
	}
	p := &progress{w: w, clock: clock, start: clock.Now()}
	p.draw(0, total)
	return p.draw
}

type progress struct {
	mu       sync.Mutex
	w        io.Writer
	clock    Clock
	start    time.Time
	last     int // length of the previous line, to blank out its tail
	finished bool
}

func (p *progress) draw(done, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finished {
		return
	}
	line := progressLine(done, total, p.clock.Now().Sub(p.start))
	pad := max(p.last-len(line), 0)
	p.last = len(line)
	end := ""
	if done >= total {
		end = "\n"
		p.finished = true
	}
	fmt.Fprintf(p.w, "\r%s%s%s", line, strings.Repeat(" ", pad), end)
}

// progressLine renders one state of the bar; only ASCII, so that len is
// the width on screen.
func progressLine(done, total int, elapsed time.Duration) string {
	frac := 1.0
	if total > 0 {
		frac = min(max(float64(done)/float64(total), 0), 1)
	}
	filled := int(frac * barWidth)
	bar := strings.Repeat("=", filled)
	if filled < barWidth {
		bar += ">" + strings.Repeat(" ", barWidth-filled-1)
	}
	rate, eta := "-- req/s", "ETA --"
	if done > 0 && elapsed > 0 {
		r := float64(done) / elapsed.Seconds()
		rate = fmt.Sprintf("%.1f req/s", r)
		left := time.Duration(float64(max(total-done, 0)) / r * float64(time.Second))
		eta = "ETA " + left.Round(time.Second).String()
	}
	if done >= total {
		eta = "in " + elapsed.Round(100*time.Millisecond).String()
	}
	width := len(fmt.Sprint(total))
	return fmt.Sprintf("[%s] %*d/%d  %s  %s", bar, width, done, total, rate, eta)
}
