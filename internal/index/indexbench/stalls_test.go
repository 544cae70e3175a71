package indexbench

import (
	"testing"
	"time"
)

func TestStallsOf(t *testing.T) {
	us := time.Microsecond
	for _, c := range []struct {
		name    string
		gaps    []time.Duration
		elapsed time.Duration
		want    Stalls
	}{
		{"none", nil, time.Second, Stalls{}},
		{"no time", []time.Duration{5 * us}, 0, Stalls{}},
		{"ticks", []time.Duration{12 * us, 10 * us, 11 * us, 40 * us}, 4 * time.Millisecond,
			Stalls{PerSecond: 1000, MedianUs: 12, Stalled: 73e-6 / 4e-3}},
	} {
		got := stallsOf(c.gaps, c.elapsed)
		if !near(got.PerSecond, c.want.PerSecond) || !near(got.MedianUs, c.want.MedianUs) || !near(got.Stalled, c.want.Stalled) {
			t.Errorf("%s: stallsOf = %+v, want %+v", c.name, got, c.want)
		}
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestMeasureStalls(t *testing.T) {
	s := MeasureStalls(20 * time.Millisecond)
	if s.PerSecond < 0 || s.Stalled < 0 || s.Stalled > 1 || (s.PerSecond == 0) != (s.MedianUs == 0) {
		t.Errorf("MeasureStalls = %+v: rates out of range", s)
	}
	if s.MedianUs != 0 && s.MedianUs < float64(stallGap)/float64(time.Microsecond) {
		t.Errorf("median stall %.2f µs is below the %v threshold", s.MedianUs, stallGap)
	}
}
