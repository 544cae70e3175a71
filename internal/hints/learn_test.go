package hints

import (
	"math"
	"testing"
	"time"

	"kvrouter/internal/index"
)

var (
	srcA   = index.WorkerRank("a", 0)
	srcB   = index.WorkerRank("b", 0)
	tgt    = index.WorkerRank("t", 0)
	epoch0 = time.Unix(1_700_000_000, 0)
)

func newLearned(t *testing.T, cfg LearnConfig, bs int) (*Learner, *Learned) {
	t.Helper()
	l, err := NewLearner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l, &Learned{L: l, BlockSize: bs, Margin: 0.1}
}

// TestLearnedPrior: before any measurement the documented prior hints a
// long prefix and not a block or two.
func TestLearnedPrior(t *testing.T) {
	_, p := newLearned(t, LearnConfig{}, 16)
	for _, tc := range []struct {
		blocks int
		worth  bool
	}{{1, false}, {2, false}, {8, true}, {64, true}, {4096, true}} {
		e := p.Consider(Pull{Source: srcA, Target: tgt, ExtraBlocks: tc.blocks})
		if e.Worth != tc.worth {
			t.Errorf("%d blocks: worth %v (pull %v, recompute %v), want %v", tc.blocks, e.Worth, e.Pull, e.Recompute, tc.worth)
		}
		if e.MeasuredBandwidth || e.MeasuredPrefill {
			t.Errorf("%d blocks: claims measurements before any", tc.blocks)
		}
	}
}

// fleetSim is a pull source with a setup and a rate, and a target with a
// prefill rate and some queueing noise.
type fleetSim struct {
	setup    time.Duration
	perToken time.Duration // pull
	prefill  time.Duration // recompute, per token
}

func (f fleetSim) pull(tokens int) time.Duration {
	return f.setup + time.Duration(tokens)*f.perToken
}

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol*math.Abs(want) }

// TestLearnerConverges: pulls of varied sizes and prefills with queueing
// noise bring the estimates to the fleet's figures.
func TestLearnerConverges(t *testing.T) {
	l, _ := newLearned(t, LearnConfig{}, 64)
	sim := fleetSim{setup: 130 * time.Millisecond, perToken: 17 * time.Microsecond, prefill: 75 * time.Microsecond}
	now := epoch0
	sizes := []int{2048, 8192, 12288, 640, 4096}
	for i := range 40 {
		n := sizes[i%len(sizes)]
		now = now.Add(time.Second)
		l.ObservePull(PullSample{Source: srcA, Target: tgt, Tokens: n, Wanted: n, Bytes: int64(n) * 16 << 10, Wall: sim.pull(n)}, now)
		queue := time.Duration(i%7) * 20 * time.Millisecond
		l.ObservePrefill(tgt, n, queue+time.Duration(n)*sim.prefill, now)
	}
	pe, re := l.Pull(srcA, tgt), l.Recompute(tgt)
	if !near(pe.Setup.Seconds(), sim.setup.Seconds(), 0.15) || !near(pe.SecondsPerToken, sim.perToken.Seconds(), 0.15) {
		t.Errorf("pull estimate setup %v, %.3g s/token; want %v, %.3g", pe.Setup, pe.SecondsPerToken, sim.setup, sim.perToken.Seconds())
	}
	if !near(pe.BytesPerToken, 16<<10, 0.01) {
		t.Errorf("bytes per token %v, want %d", pe.BytesPerToken, 16<<10)
	}
	if !near(re.SecondsPerToken, sim.prefill.Seconds(), 0.15) {
		t.Errorf("recompute %.3g s/token, want %.3g", re.SecondsPerToken, sim.prefill.Seconds())
	}
	// A pair never seen takes the fleet's estimate.
	if fb := l.Pull(srcB, tgt); !near(fb.SecondsPerToken, sim.perToken.Seconds(), 0.15) || fb.Samples != 0 {
		t.Errorf("unseen pair: %.3g s/token with %v samples, want the fleet's %.3g", fb.SecondsPerToken, fb.Samples, sim.perToken.Seconds())
	}
}

// TestSlowSourceStopsBeingHinted: requests alternate between two sources;
// when one source's pulls turn slow (its setup goes from 130 ms to 3 s), it
// stops being hinted within a bounded number of requests while the other
// keeps being hinted; once its samples have faded with time, it is tried
// again.
func TestSlowSourceStopsBeingHinted(t *testing.T) {
	const bs, blocks = 64, 150 // 9,600 tokens: 0.29 s to pull, 0.72 s to recompute
	l, p := newLearned(t, LearnConfig{}, bs)
	fast := fleetSim{setup: 130 * time.Millisecond, perToken: 17 * time.Microsecond, prefill: 75 * time.Microsecond}
	slow := fast
	slow.setup = 3 * time.Second
	speed := map[index.Source]fleetSim{srcA: fast, srcB: fast}
	now := epoch0
	hinted := map[index.Source]int{}
	request := func(src index.Source) bool {
		now = now.Add(200 * time.Millisecond)
		l.Age(now)
		tokens := blocks * bs
		e := p.Consider(Pull{Source: src, Target: tgt, ExtraBlocks: blocks})
		recomputed := tokens
		if e.Worth {
			hinted[src]++
			l.ObservePull(PullSample{Source: src, Target: tgt, Tokens: tokens, Wanted: tokens, Wall: speed[src].pull(tokens)}, now)
			recomputed = 64 // the partial tail
		}
		l.ObservePrefill(tgt, recomputed, time.Duration(recomputed)*fast.prefill+10*time.Millisecond, now)
		return e.Worth
	}
	for range 20 {
		for _, s := range []index.Source{srcA, srcB} {
			if !request(s) {
				t.Fatalf("source %v not hinted while fast: %+v", s, p.Consider(Pull{Source: s, Target: tgt, ExtraBlocks: blocks}))
			}
		}
	}
	speed[srcA] = slow
	before := hinted[srcA]
	for range 20 {
		request(srcA)
		if !request(srcB) {
			t.Fatalf("fast source B stopped being hinted after %d requests", hinted[srcB])
		}
	}
	const bound = 3
	n := hinted[srcA] - before
	if n > bound || n == 0 {
		t.Fatalf("slow source hinted %d more times, want 1..%d", n, bound)
	}
	t.Logf("the slow source was hinted %d times after it slowed down", n)
	if request(srcA) {
		t.Fatal("slow source hinted again at once")
	}
	// Its samples fade; the prior (through the fleet's estimate) brings it back.
	now = now.Add(20 * l.Config().HalfLife)
	if !request(srcA) {
		t.Fatalf("slow source never tried again after its samples faded: %+v", l.Pull(srcA, tgt))
	}
}

// TestShortPullsCount: a pair whose pulls keep coming up short is charged
// the recompute they leave.
func TestShortPullsCount(t *testing.T) {
	l, p := newLearned(t, LearnConfig{}, 64)
	now := epoch0
	for range 10 {
		now = now.Add(time.Second)
		l.ObservePull(PullSample{Source: srcA, Target: tgt, Tokens: 0, Wanted: 9600, Wall: 20 * time.Millisecond, Short: true}, now)
	}
	e := p.Consider(Pull{Source: srcA, Target: tgt, ExtraBlocks: 150})
	if e.Worth || e.ShortShare < 0.9 {
		t.Fatalf("a pair whose pulls all fail is worth %v (short share %.2f)", e.Worth, e.ShortShare)
	}
}

// TestLearnedOverrides: an operator's figures replace the learned ones.
func TestLearnedOverrides(t *testing.T) {
	l, p := newLearned(t, LearnConfig{}, 16)
	p.Fixed = Overrides{BandwidthBytesPerS: 1e9 / 8, BytesPerToken: 256 << 10, PrefillTokensPerS: 20000}
	// 1 Gbit/s with 256 KiB a token never beats 20,000 tokens/s.
	if e := p.Consider(Pull{Source: srcA, Target: tgt, ExtraBlocks: 1000}); e.Worth {
		t.Fatalf("hinted over a 1 Gbit/s link: %+v", e)
	}
	_ = l
}

func TestLearnerRefusesBadPrior(t *testing.T) {
	for _, pr := range []Prior{{Setup: -1}, {BandwidthBytesPerS: -1}, {BytesPerToken: math.Inf(1)}, {PrefillTokensPerS: math.NaN()}} {
		if _, err := NewLearner(LearnConfig{Prior: pr}); err == nil {
			t.Errorf("prior %+v accepted", pr)
		}
	}
}

// TestRecomputeIgnoresQueueing: time to first token is the recompute plus
// queueing; when the queueing goes against prompt length (long cold prompts
// sent to idle targets, short turns queued behind them), a line through
// the samples would be tilted, while the low quantile of time per token
// stays at the rate. A target that slows down is followed within its
// window.
func TestRecomputeIgnoresQueueing(t *testing.T) {
	l, _ := newLearned(t, LearnConfig{}, 64)
	now := epoch0
	const rate = 75 * time.Microsecond
	for i := range 40 {
		now = now.Add(time.Second)
		n := 1024
		queue := time.Duration(i%5) * 300 * time.Millisecond
		if i%3 == 0 {
			n, queue = 10240, time.Duration(i%2)*20*time.Millisecond
		}
		l.ObservePrefill(tgt, n, queue+time.Duration(n)*rate+10*time.Millisecond, now)
	}
	if got := l.Recompute(tgt).SecondsPerToken; !near(got, rate.Seconds(), 0.15) {
		t.Fatalf("recompute %.3g s/token, want %.3g", got, rate.Seconds())
	}
	for i := range 16 {
		now = now.Add(time.Second)
		l.ObservePrefill(tgt, 4096, time.Duration(4096)*2*rate+time.Duration(i%4)*50*time.Millisecond, now)
	}
	if got := l.Recompute(tgt).SecondsPerToken; !near(got, 2*rate.Seconds(), 0.15) {
		t.Fatalf("after slowing down: %.3g s/token, want %.3g", got, 2*rate.Seconds())
	}
	// A target never seen takes the fleet's pooled rate; samples fade.
	if got := l.Recompute(srcB).SecondsPerToken; got < rate.Seconds() || got > 2.2*rate.Seconds() {
		t.Fatalf("unseen target: %.3g s/token", got)
	}
	l.Age(now.Add(prefillAges*l.Config().HalfLife + time.Second))
	if got := l.Recompute(tgt); got.Samples != 0 || got.SecondsPerToken != 1/DefaultPrior().PrefillTokensPerS {
		t.Fatalf("after its samples faded: %+v", got)
	}
}

// TestQueuedPullsShareTheSource: pulls already in flight from a source
// lengthen the next one, until recomputing is cheaper. With the prior a
// token costs 21 µs to pull and 50 µs to recompute: 64 blocks of 16 tokens
// pull in 2 + 21.5 ms against 51 ms of recompute.
func TestQueuedPullsShareTheSource(t *testing.T) {
	_, p := newLearned(t, LearnConfig{}, 16)
	for _, tc := range []struct {
		queued int
		worth  bool
	}{{0, true}, {64, true}, {128, false}, {1024, false}} {
		e := p.Consider(Pull{Source: srcA, Target: tgt, ExtraBlocks: 64, QueuedBlocks: tc.queued})
		if e.Worth != tc.worth {
			t.Errorf("%d queued: worth %v (pull %v, recompute %v), want %v", tc.queued, e.Worth, e.Pull, e.Recompute, tc.worth)
		}
	}
}
