// This file holds the live estimates of what a pull and a recompute cost, learned from what engines report.

package hints

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"kvrouter/internal/index"
)

// Prior is what the learner assumes before any measurement: an RDMA-class
// fleet (docs/wire.md §6.2), on which a long prefix is worth pulling.
type Prior struct {
	// Setup is the fixed cost of one pull: control round trips,
	// registration, the source scheduling the read.
	Setup time.Duration
	// BandwidthBytesPerS is the transfer rate of one pull.
	BandwidthBytesPerS float64
	// BytesPerToken is the KV cache size of a token, until engines report
	// the bytes they pulled.
	BytesPerToken float64
	// PrefillTokensPerS is a target's recompute rate.
	PrefillTokensPerS float64
}

// DefaultPrior is a fleet of GPUs on a 100 Gbit/s RDMA fabric serving a
// 32B-class model (Qwen3-32B BF16: 256 KiB of KV per token) at 20,000
// prefill tokens/s: a token costs 21 µs to pull and 50 µs to recompute, so
// with 2 ms of setup any prefix beyond ~70 tokens is worth pulling, until
// measurements say otherwise.
func DefaultPrior() Prior {
	return Prior{Setup: 2 * time.Millisecond, BandwidthBytesPerS: 100e9 / 8, BytesPerToken: 256 << 10, PrefillTokensPerS: 20000}
}

// LearnConfig configures a Learner. Zero fields take the defaults.
type LearnConfig struct {
	Prior Prior
	// HalfLife is how fast samples fade with time, so that an estimate
	// not refreshed returns to its prior (and a source judged slow is
	// tried again). Default 2 minutes.
	HalfLife time.Duration
	// PullKeep is the share of a pair's past weight each new pull keeps:
	// a pair that turns slow is noticed within a few pulls. Default 0.7
	// (about 3 pulls of memory).
	PullKeep float64
	// FleetKeep is the same for the fleet's pooled pulls, the prior of a
	// pair not measured yet. Default 0.9.
	FleetKeep float64
	// PrefillWindow is how many recent recompute samples a target keeps
	// (default 16; the fleet four times as many), PrefillQuantile the low
	// quantile of their time per token taken as its rate (default 0.25),
	// and PrefillMinTokens the fewest recomputed tokens a sample needs
	// (default 512). Time to first token is the recompute plus queueing
	// and fixed costs, never less than the recompute: its low quantile
	// over many requests is the rate, where a line fitted through it is
	// tilted by how queueing goes with prompt length.
	PrefillWindow    int
	PrefillQuantile  float64
	PrefillMinTokens int
	// PriorWeight is how many samples the prior counts for in the fleet's
	// estimates. A pair or a target weighs the fleet's estimate, its own
	// prior, at a quarter of that: its own samples speak for it. Default 1.
	PriorWeight float64
}

// ErrBadPrior marks a prior that cannot produce an estimate.
var ErrBadPrior = errors.New("hints: bad prior")

func (c *LearnConfig) fill() error {
	d := DefaultPrior()
	p := &c.Prior
	if p.Setup == 0 {
		p.Setup = d.Setup
	}
	if p.BandwidthBytesPerS == 0 {
		p.BandwidthBytesPerS = d.BandwidthBytesPerS
	}
	if p.BytesPerToken == 0 {
		p.BytesPerToken = d.BytesPerToken
	}
	if p.PrefillTokensPerS == 0 {
		p.PrefillTokensPerS = d.PrefillTokensPerS
	}
	switch {
	case p.Setup < 0:
		return fmt.Errorf("%w: setup %v must not be negative", ErrBadPrior, p.Setup)
	case !usable(p.BandwidthBytesPerS):
		return fmt.Errorf("%w: bandwidth %v must be positive and finite", ErrBadPrior, p.BandwidthBytesPerS)
	case !usable(p.BytesPerToken):
		return fmt.Errorf("%w: bytes per token %v must be positive and finite", ErrBadPrior, p.BytesPerToken)
	case !usable(p.PrefillTokensPerS):
		return fmt.Errorf("%w: prefill rate %v must be positive and finite", ErrBadPrior, p.PrefillTokensPerS)
	}
	if c.HalfLife <= 0 {
		c.HalfLife = 2 * time.Minute
	}
	if !(c.PullKeep > 0 && c.PullKeep < 1) {
		c.PullKeep = 0.7
	}
	if !(c.FleetKeep > 0 && c.FleetKeep < 1) {
		c.FleetKeep = 0.9
	}
	if c.PrefillWindow <= 0 {
		c.PrefillWindow = 16
	}
	if !(c.PrefillQuantile >= 0 && c.PrefillQuantile <= 1) || c.PrefillQuantile == 0 {
		c.PrefillQuantile = 0.25
	}
	if c.PrefillMinTokens <= 0 {
		c.PrefillMinTokens = 512
	}
	if !(c.PriorWeight > 0) {
		c.PriorWeight = 1
	}
	return nil
}

// PullSample is one restore as the target's engine reported it.
type PullSample struct {
	Source, Target index.Source
	// Tokens is what the pull brought; Wanted what the hint asked for
	// beyond the target's own prefix.
	Tokens, Wanted int
	Bytes          int64 // 0: not reported
	Wall           time.Duration
	// Short: fewer blocks came than were wanted; the rest was recomputed.
	Short bool
}

// Learner keeps live estimates of pull and recompute costs: per (source,
// target) pair a pull's setup and its time per token, per target its
// recompute time per token, each a line fitted by weighted least squares
// over samples whose weight decays with every newer sample and with time.
// A pair without samples of its own takes the fleet's pooled estimate, the
// fleet without samples the prior; a prior counts as PriorWeight samples
// on the line it predicts.
//
// It is pure: time comes in with every call. Safe for concurrent use.
type Learner struct {
	cfg LearnConfig

	mu         sync.RWMutex
	aged       time.Time
	fleet      fit // every pull, pooled
	fleetBytes fit // x: tokens, y: bytes (through the origin)
	pairs      map[pair]*pairState
	prefill    window // every target's, pooled
	targets    map[index.Source]*targetState
}

type pair struct{ src, dst index.Source }

type pairState struct {
	f      fit
	short  float64 // decayed count of short pulls, on f's weight scale
	bytes  fit     // x: tokens, y: bytes (through the origin)
	pulls  int
	last   time.Time
	lastMS float64
}

type targetState struct {
	w       window
	samples int
	last    time.Time
}

// NewLearner returns a learner with no samples.
func NewLearner(cfg LearnConfig) (*Learner, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	return &Learner{cfg: cfg, pairs: map[pair]*pairState{}, targets: map[index.Source]*targetState{},
		prefill: window{max: 4 * cfg.PrefillWindow}}, nil
}

// Config is the learner's configuration, defaults filled.
func (l *Learner) Config() LearnConfig { return l.cfg }

// prefillRef is the prompt length the prior's recompute anchor sits at:
// where its slope is pinned.
const prefillRef = 4096

// ObservePull records a restore. A pull that brought nothing still tells
// how long it took to fail.
func (l *Learner) ObservePull(s PullSample, now time.Time) {
	if s.Wall < 0 || s.Tokens < 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.age(now)
	k := pair{s.Source, s.Target}
	p := l.pairs[k]
	if p == nil {
		p = &pairState{}
		l.pairs[k] = p
	}
	x, y := float64(s.Tokens), s.Wall.Seconds()
	p.short *= l.cfg.PullKeep
	if s.Short {
		p.short++
	}
	p.f.add(x, y, l.cfg.PullKeep)
	if s.Bytes > 0 && s.Tokens > 0 {
		p.bytes.add(x, float64(s.Bytes), l.cfg.PullKeep)
		l.fleetBytes.add(x, float64(s.Bytes), l.cfg.FleetKeep)
	}
	p.pulls++
	p.last, p.lastMS = now, y*1e3
	l.fleet.add(x, y, l.cfg.FleetKeep)
}

// ObservePrefill records how long a target took to its first token while
// recomputing tokens of the prompt (time spent pulling taken out). Too few
// tokens say more about fixed costs than about the rate, and are left out.
func (l *Learner) ObservePrefill(target index.Source, tokens int, took time.Duration, now time.Time) {
	if tokens < l.cfg.PrefillMinTokens || took <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.age(now)
	t := l.targets[target]
	if t == nil {
		t = &targetState{w: window{max: l.cfg.PrefillWindow}}
		l.targets[target] = t
	}
	r := took.Seconds() / float64(tokens)
	t.w.add(r, now)
	t.samples++
	t.last = now
	l.prefill.add(r, now)
}

// Age lets time fade every sample; a service calls it on its ticker.
// Estimates whose weight has faded to nothing are forgotten.
func (l *Learner) Age(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.age(now)
	for k, p := range l.pairs {
		if p.f.w < forgotten {
			delete(l.pairs, k)
		}
	}
	old := now.Add(-prefillAges * l.cfg.HalfLife)
	l.prefill.forget(old)
	for k, t := range l.targets {
		if t.w.forget(old); len(t.w.r) == 0 {
			delete(l.targets, k)
		}
	}
}

// prefillAges is how many half-lives a recompute sample is kept: a target
// that has not recomputed anything for that long takes the fleet's rate.
const prefillAges = 4

// forgotten is the weight below which an estimate is its prior's.
const forgotten = 1e-3

// ownShare is the weight of the fleet's estimate in a pair's or a target's
// own, against PriorWeight in the fleet's.
const ownShare = 0.25

// age applies time decay since the last call. Callers hold mu.
func (l *Learner) age(now time.Time) {
	if l.aged.IsZero() || !now.After(l.aged) {
		if l.aged.IsZero() {
			l.aged = now
		}
		return
	}
	f := math.Exp2(-now.Sub(l.aged).Seconds() / l.cfg.HalfLife.Seconds())
	l.aged = now
	l.fleet.scale(f)
	l.fleetBytes.scale(f)
	for _, p := range l.pairs {
		p.f.scale(f)
		p.bytes.scale(f)
		p.short *= f
	}
}

// PullEstimate is a predicted pull.
type PullEstimate struct {
	Setup           time.Duration
	SecondsPerToken float64
	// BytesPerToken is learned from the engines' reports, else the prior.
	BytesPerToken float64
	// ShortShare is the decayed share of the pair's pulls that came up
	// short.
	ShortShare float64
	// Samples is the pair's own decayed weight (0: fleet or prior only).
	Samples float64
}

// Time is the predicted wall time of pulling tokens.
func (e PullEstimate) Time(tokens int) time.Duration {
	return seconds(e.Setup.Seconds() + float64(tokens)*e.SecondsPerToken)
}

// BandwidthBytesPerS is the transfer rate the estimate implies.
func (e PullEstimate) BandwidthBytesPerS() float64 {
	if e.SecondsPerToken <= 0 {
		return math.Inf(1)
	}
	return e.BytesPerToken / e.SecondsPerToken
}

// Pull predicts a pull from src to dst.
func (l *Learner) Pull(src, dst index.Source) PullEstimate {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.pull(src, dst)
}

func (l *Learner) pull(src, dst index.Source) PullEstimate {
	pr := l.cfg.Prior
	a0, b0 := pr.Setup.Seconds(), pr.BytesPerToken/pr.BandwidthBytesPerS
	ref := l.pullRef()
	fa, fb := l.fleet.solve(a0, b0, ref, l.cfg.PriorWeight, 0)
	e := PullEstimate{Setup: seconds(fa), SecondsPerToken: fb, BytesPerToken: pr.BytesPerToken}
	if l.fleetBytes.w > 0 && l.fleetBytes.xx > 0 {
		e.BytesPerToken = l.fleetBytes.xy / l.fleetBytes.xx
	}
	p := l.pairs[pair{src, dst}]
	if p == nil {
		return e
	}
	a, b := p.f.solve(fa, fb, ref, l.cfg.PriorWeight*ownShare, 0)
	e.Setup, e.SecondsPerToken, e.Samples = seconds(a), b, p.f.w
	if p.f.w > 0 {
		e.ShortShare = p.short / p.f.w
	}
	if p.bytes.w > 0 && p.bytes.xx > 0 {
		e.BytesPerToken = p.bytes.xy / p.bytes.xx
	}
	return e
}

// pullRef is where the prior's second anchor sits: the fleet's mean pull
// size once there is one, so that the prior pins the setup (the line's
// value at 0) while the samples set the time per token.
func (l *Learner) pullRef() float64 {
	if l.fleet.w > forgotten && l.fleet.x > 0 {
		return l.fleet.x / l.fleet.w
	}
	return prefillRef
}

// RecomputeEstimate is a target's predicted recompute rate.
type RecomputeEstimate struct {
	SecondsPerToken float64
	Samples         float64 // the target's own samples in its window (0: the fleet's or the prior)
}

// TokensPerS is the recompute rate the estimate implies.
func (e RecomputeEstimate) TokensPerS() float64 {
	if e.SecondsPerToken <= 0 {
		return math.Inf(1)
	}
	return 1 / e.SecondsPerToken
}

// Recompute predicts a target's recompute rate.
func (l *Learner) Recompute(dst index.Source) RecomputeEstimate {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.recompute(dst)
}

// minWindow is the fewest samples a window needs to speak for itself.
const minWindow = 3

func (l *Learner) recompute(dst index.Source) RecomputeEstimate {
	e := RecomputeEstimate{SecondsPerToken: 1 / l.cfg.Prior.PrefillTokensPerS}
	if len(l.prefill.r) >= minWindow {
		e.SecondsPerToken = l.prefill.quantile(l.cfg.PrefillQuantile)
	}
	if t := l.targets[dst]; t != nil && len(t.w.r) >= minWindow {
		e.SecondsPerToken, e.Samples = t.w.quantile(l.cfg.PrefillQuantile), float64(len(t.w.r))
	}
	return e
}

// window keeps the latest samples, up to max, with their times.
type window struct {
	max int
	r   []float64
	at  []time.Time
}

func (w *window) add(r float64, now time.Time) {
	if len(w.r) == w.max {
		w.r, w.at = w.r[1:], w.at[1:]
	}
	w.r, w.at = append(w.r, r), append(w.at, now)
}

// forget drops samples taken before old.
func (w *window) forget(old time.Time) {
	i := 0
	for i < len(w.at) && w.at[i].Before(old) {
		i++
	}
	w.r, w.at = w.r[i:], w.at[i:]
}

// quantile is the q-quantile of the samples, the nearest rank below.
func (w *window) quantile(q float64) float64 {
	s := slices.Clone(w.r)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}

// fit holds the decayed weighted sums of a least-squares line.
type fit struct{ w, x, y, xx, xy float64 }

// add scales the past by keep and adds (x, y) with weight 1.
func (f *fit) add(x, y, keep float64) {
	f.scale(keep)
	f.w++
	f.x += x
	f.y += y
	f.xx += x * x
	f.xy += x * y
}

func (f *fit) scale(k float64) {
	f.w, f.x, f.y, f.xx, f.xy = f.w*k, f.x*k, f.y*k, f.xx*k, f.xy*k
}

// solve fits y = a + b·x to the samples and the prior line (a0, b0), which
// counts as weight w0 split between x = 0 and x = ref. The slope stays at
// least minB and the intercept at least 0: a pull cannot get cheaper with
// size, nor cost less than nothing.
func (f fit) solve(a0, b0, ref, w0, minB float64) (a, b float64) {
	h := w0 / 2
	g := fit{
		w:  f.w + w0,
		x:  f.x + h*ref,
		y:  f.y + h*a0 + h*(a0+b0*ref),
		xx: f.xx + h*ref*ref,
		xy: f.xy + h*ref*(a0+b0*ref),
	}
	den := g.w*g.xx - g.x*g.x
	if den <= 0 || math.IsNaN(den) {
		return a0, b0
	}
	b = (g.w*g.xy - g.x*g.y) / den
	if !(b >= minB) {
		b = minB
	}
	a = (g.y - b*g.x) / g.w
	if a < 0 {
		// Through the origin instead.
		a, b = 0, max(g.xy/g.xx, minB)
	}
	return a, b
}

// LearnView is the learner's state for operators.
type LearnView struct {
	Prior     Prior
	Fleet     PullEstimate
	Recompute RecomputeEstimate
	Pairs     []PairView
	Targets   []TargetView
}

// PairView is one (source, target) pair's estimate.
type PairView struct {
	Source, Target index.Source
	PullEstimate
	Pulls  int
	LastMS float64 // the last pull's wall time
	Last   time.Time
}

// TargetView is one target's recompute estimate.
type TargetView struct {
	Target index.Source
	RecomputeEstimate
	Prefills int
	Last     time.Time
}

// View returns every estimate, sorted by source and target.
func (l *Learner) View() LearnView {
	l.mu.RLock()
	defer l.mu.RUnlock()
	v := LearnView{Prior: l.cfg.Prior, Fleet: l.pull(index.Source{}, index.Source{}), Recompute: l.recompute(index.Source{})}
	for k, p := range l.pairs {
		v.Pairs = append(v.Pairs, PairView{Source: k.src, Target: k.dst, PullEstimate: l.pull(k.src, k.dst),
			Pulls: p.pulls, LastMS: p.lastMS, Last: p.last})
	}
	for k, t := range l.targets {
		v.Targets = append(v.Targets, TargetView{Target: k, RecomputeEstimate: l.recompute(k), Prefills: t.samples, Last: t.last})
	}
	slices.SortFunc(v.Pairs, func(a, b PairView) int {
		return cmp.Or(a.Source.Compare(b.Source), a.Target.Compare(b.Target))
	})
	slices.SortFunc(v.Targets, func(a, b TargetView) int { return a.Target.Compare(b.Target) })
	return v
}

// Learned is the default hint policy: hint when the pull the learner
// predicts for the pair, plus the recompute of what its pulls tend to leave
// short, beats the target's predicted recompute by Margin. Fixed, when set,
// replaces learned figures with an operator's.
type Learned struct {
	L         *Learner
	BlockSize int
	// Margin is the share of the recompute a pull must save: 0.1 hints
	// when the pull costs at most 90% of recomputing.
	Margin float64
	Fixed  Overrides
}

// Overrides are an operator's fixed figures; zero fields are learned.
type Overrides struct {
	Setup              time.Duration // < 0: zero setup
	BandwidthBytesPerS float64
	BytesPerToken      float64
	PrefillTokensPerS  float64
}

var _ Policy = (*Learned)(nil)

const policyLearned = "learned"

func (p *Learned) Consider(pl Pull) Estimate {
	e := Estimate{Policy: policyLearned, ExtraBlocks: pl.ExtraBlocks}
	pe := p.L.Pull(pl.Source, pl.Target)
	re := p.L.Recompute(pl.Target)
	e.MeasuredBandwidth, e.MeasuredPrefill = pe.Samples > 0, re.Samples > 0
	f := p.Fixed
	switch {
	case f.Setup < 0:
		pe.Setup = 0
	case f.Setup > 0:
		pe.Setup = f.Setup
	}
	if f.BytesPerToken > 0 {
		pe.BytesPerToken = f.BytesPerToken
	}
	if f.BandwidthBytesPerS > 0 {
		pe.SecondsPerToken = pe.BytesPerToken / f.BandwidthBytesPerS
		e.MeasuredBandwidth = false
	}
	if f.PrefillTokensPerS > 0 {
		re.SecondsPerToken = 1 / f.PrefillTokensPerS
		e.MeasuredPrefill = false
	}
	e.BandwidthBytesPerS, e.PrefillTokensPerS = pe.BandwidthBytesPerS(), re.TokensPerS()
	e.Setup, e.ShortShare, e.PullSamples, e.PrefillSamples = pe.Setup, pe.ShortShare, pe.Samples, re.Samples
	if pl.ExtraBlocks <= 0 {
		return e
	}
	e.ExtraTokens = pl.ExtraBlocks * p.BlockSize
	e.Bytes = float64(e.ExtraTokens) * pe.BytesPerToken
	recompute := float64(e.ExtraTokens) * re.SecondsPerToken
	// Pulls in flight from the same source share its transfer: this one
	// ends once their blocks and its own have moved.
	moved := e.ExtraTokens + max(pl.QueuedBlocks, 0)*p.BlockSize
	pull := pe.Time(moved).Seconds() + min(max(pe.ShortShare, 0), 1)*recompute
	e.Pull, e.Recompute = seconds(pull), seconds(recompute)
	e.Worth = pull < (1-p.Margin)*recompute
	return e
}
