package cost

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestScoreTerms(t *testing.T) {
	w := DefaultWeights()
	s := Score(w, 10, 16, []Candidate{
		{Worker: "a", DeviceOverlap: 4, HostOverlap: 4, DiskOverlap: 4}, // 10-4-3-1 = 2
		{Worker: "b", DeviceOverlap: 12},                                // clamps at 0
		{Worker: "c", ActivePrefillTokens: 32, ActiveDecodeBlocks: 5, ActiveRequests: 3},
	})
	cases := []struct {
		adj, cost float64
	}{
		{2, 2 + 10},
		{0, 0 + 10},
		{10, 10 + 2 + 15},
	}
	for i, c := range cases {
		if s[i].AdjustedPrefill != c.adj || s[i].Cost != c.cost {
			t.Errorf("%s: adjusted %v cost %v, want %v %v", s[i].Worker, s[i].AdjustedPrefill, s[i].Cost, c.adj, c.cost)
		}
	}
	w.RequestWeight = 2
	if got := Score(w, 10, 16, []Candidate{{ActiveRequests: 3}})[0].Cost; got != 10+10+6 {
		t.Errorf("request weight: cost %v, want 26", got)
	}
}

func TestChooseGreedy(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		name  string
		costs []float64
		trees []int
		want  int
	}{
		{"cheapest", []float64{3, 1, 2}, []int{0, 0, 0}, 1},
		{"tie to smaller tree", []float64{1, 1, 2}, []int{9, 4, 0}, 1},
		{"empty", nil, nil, -1},
	}
	for _, tc := range tests {
		s := make([]Scored, len(tc.costs))
		for i := range s {
			s[i].Cost, s[i].TreeSize = tc.costs[i], tc.trees[i]
		}
		if got := Choose(s, 0, rng); got != tc.want {
			t.Errorf("%s: chose %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestChooseTieIsRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s := []Scored{{Cost: 1}, {Cost: 1}}
	seen := map[int]int{}
	for range 200 {
		seen[Choose(s, 0, rng)]++
	}
	if seen[0] == 0 || seen[1] == 0 {
		t.Fatalf("equal candidates not both chosen: %v", seen)
	}
}

func TestChooseTemperature(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	s := []Scored{{Cost: 0}, {Cost: 10}}
	count := [2]int{}
	const n = 20000
	for range n {
		count[Choose(s, 1, rng)]++
	}
	// p1/p0 = exp(-1) ≈ 0.368 → p0 ≈ 0.731.
	p0 := float64(count[0]) / n
	if p0 < 0.70 || p0 > 0.76 {
		t.Fatalf("p(cheapest) = %.3f, want ≈ 0.731", p0)
	}
}

func TestLoad(t *testing.T) {
	l := NewLoad()
	r := Rank{"w", 1}
	l.Start("a", r, 100, 7)
	l.Start("a", r, 100, 7) // duplicate ignored
	l.Start("b", r, 50, 3)
	if got := l.Of(r); got != (RankLoad{PrefillTokens: 150, DecodeBlocks: 10, Requests: 2}) {
		t.Fatalf("after start: %+v", got)
	}
	l.Prefilled("a")
	l.Prefilled("a")
	if got := l.Of(r); got.PrefillTokens != 50 {
		t.Fatalf("after prefill: %+v", got)
	}
	l.Finish("a")
	l.Finish("b")
	l.Finish("b")
	if got := l.Of(r); got != (RankLoad{}) {
		t.Fatalf("after finish: %+v", got)
	}
	l.Start("c", r, 1, 1)
	l.Forget("w")
	if got := l.Of(r); got != (RankLoad{}) {
		t.Fatalf("after forget: %+v", got)
	}
}

// TestLoadEach: Each sees exactly the ranks Of reports work on.
func TestLoadEach(t *testing.T) {
	l := NewLoad()
	a, b, c := Rank{"w", 0}, Rank{"w", 1}, Rank{"v", 0}
	l.Start("1", a, 10, 1)
	l.Start("2", a, 20, 2)
	l.Start("3", b, 5, 1)
	l.Start("4", c, 7, 3)
	l.Finish("4")
	got := map[Rank]RankLoad{}
	l.Each(func(r Rank, rl RankLoad) { got[r] = rl })
	if len(got) != 2 || got[a] != l.Of(a) || got[b] != l.Of(b) {
		t.Fatalf("Each saw %v", got)
	}
}

// TestAppendScores: appending keeps what dst held and prices the new
// candidates as Score does.
func TestAppendScores(t *testing.T) {
	w := DefaultWeights()
	cands := []Candidate{{Worker: "a", DeviceOverlap: 3}, {Worker: "b", ActiveDecodeBlocks: 2}}
	first := Score(w, 8, 16, cands[:1])
	got := AppendScores(first, w, 8, 16, cands[1:])
	want := Score(w, 8, 16, cands)
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("appended %+v, want %+v", got, want)
	}
}

// TestFloor: no unloaded candidate holding at most depth blocks, on any mix
// of tiers, costs less than Floor(depth), and the one holding all of them on
// the best-credited tier costs exactly that.
func TestFloor(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	credits := []float64{0, 0.1, 0.25, 0.75, 1, 1.5, 3}
	pick := func() float64 { return credits[rng.IntN(len(credits))] }
	for range 20000 {
		w := Weights{OverlapCredit: pick(), HostCredit: pick(), DiskCredit: pick(), PrefillLoadScale: pick(), RequestWeight: pick()}
		rb := 1 + rng.IntN(200)
		depth := rng.IntN(rb + 1)
		floor, ok := w.Floor(rb, depth)
		if !ok {
			t.Fatalf("%+v: no floor", w)
		}
		dev := rng.IntN(depth + 1)
		host := rng.IntN(depth - dev + 1)
		disk := rng.IntN(depth - dev - host + 1)
		c := Candidate{DeviceOverlap: dev, HostOverlap: host, DiskOverlap: disk}
		// Within rounding: a platform may fuse a multiply and a subtract.
		tol := 1e-9 * (1 + floor)
		if cost := w.Cost(rb, 16, &c); cost < floor-tol {
			t.Fatalf("%+v, %d blocks, %+v: cost %v below floor(%d) %v", w, rb, c, cost, depth, floor)
		}
		best := Candidate{DeviceOverlap: depth}
		switch max(w.OverlapCredit, w.HostCredit, w.DiskCredit) {
		case w.OverlapCredit:
		case w.HostCredit:
			best = Candidate{HostOverlap: depth}
		default:
			best = Candidate{DiskOverlap: depth}
		}
		if cost := w.Cost(rb, 16, &best); math.Abs(cost-floor) > tol {
			t.Fatalf("%+v, %d blocks: the best-credited candidate costs %v, floor(%d) %v", w, rb, cost, depth, floor)
		}
	}
	for _, w := range []Weights{{OverlapCredit: -1}, {PrefillLoadScale: math.NaN()}, {RequestWeight: -0.5}} {
		if _, ok := w.Floor(10, 5); ok {
			t.Errorf("%+v: a floor despite a negative or NaN weight", w)
		}
	}
}
