// This file holds the benchmark's options, the policies compared and the workloads.

package policybench

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"kvrouter/internal/workload"
)

// ErrOptions marks options that cannot make a benchmark; the message names
// the flag to fix.
var ErrOptions = errors.New("policybench: bad options")

// Policy is one router configuration under test. The policies differ only
// in these flags (and the cost policy's fixed figures, if any are given,
// are the same for all).
type Policy struct {
	Name  string   `json:"-"`
	Flags []string `json:"flags"`
}

// Policies are the configurations compared, in the order they run.
var Policies = []Policy{
	{"round_robin", []string{"--routing", "round-robin", "--hint-policy", "off"}},
	{"random", []string{"--routing", "random", "--hint-policy", "off"}},
	{"least_loaded", []string{"--routing", "least-loaded", "--hint-policy", "off"}},
	{"kv", []string{"--routing", "kv", "--hint-policy", "off"}},
	{"kv_hints", []string{"--routing", "kv", "--hint-policy", "cost"}},
}

// Reference is the policy the ratios compare against every other.
const Reference = "kv_hints"

// Workload names.
const (
	WorkloadAgentic  = "agentic"
	WorkloadMooncake = "mooncake"
)

// demoVocab: the engines' and router's demo tokenizer has 791 ids, the last
// few special, so token ids come from [256, 782).
var demoVocab = workload.Vocab{Lo: 256, Hi: 782}

// Options configure a run. Zero values take the preset's (Full or Quick).
type Options struct {
	// Binary is the kvrouter executable of the cluster; empty re-executes
	// this one.
	Binary string
	Quick  bool

	Engines         int
	BlockSize       int
	KVBytesPerToken int
	GPUBlocks       int
	RunnerBlocks    int
	PrefillPerToken time.Duration
	DecodePerToken  time.Duration
	RestorePerToken time.Duration
	// PullSetup is the engines' simulated fixed cost of a peer pull
	// (mocker --pull-setup-ms): what a fleet pays per transfer before its
	// first byte moves, which loopback lacks. It puts the crossover at a
	// few thousand tokens, as on a real fleet. 0 takes the preset;
	// negative adds none.
	PullSetup time.Duration
	Speedup   float64

	// HintBandwidthGbps and HintSetup, when set, fix the pull rate and
	// fixed cost the routers would otherwise learn (serve's flags of the
	// same names).
	HintBandwidthGbps float64
	HintSetup         time.Duration
	// Repeats runs every policy this many times, on seeds Agentic.Seed,
	// Agentic.Seed+1, ...; the report takes the medians.
	Repeats int

	Workload string
	Agentic  workload.AgenticConfig
	// Trace is a Mooncake JSONL file; empty replays the embedded small trace.
	Trace       string
	TimeScale   float64
	MaxRequests int

	// Policies are names from Policies; empty runs them all.
	Policies []string
	// Custom are more configurations to run after the chosen Policies,
	// each a name and its own router flags (ParsePolicy): a sweep of the
	// cost weights, for one.
	Custom []Policy

	// LogDir keeps every process's log; empty uses a temporary directory,
	// removed after a clean run.
	LogDir string
	// JSON writes the report as JSON on Out, and the table on Err.
	JSON bool
	// Plot is where the TTFT CDF SVG goes; empty writes none.
	Plot string
	// Records, when set, is a directory that receives every request's
	// figures, one JSON line each, in <policy>.jsonl.
	Records string
	// Out receives the report; Err progress and status lines (a bar when
	// TTY).
	Out, Err io.Writer
	TTY      bool
	Logger   *slog.Logger
}

// DefaultPullSetup is the presets' simulated fixed cost of a peer pull.
// With 75 µs of prefill per token against ~22 µs to pull and restore one
// (16 KiB at the ~7.5 Gbit/s loopback pulls measure on the development
// VM, plus 5 µs of restore), a pull gains ~53 µs per token, so 130 ms of
// setup puts the crossover near 2,500 tokens (2,000 at 30 Gbit/s).
const DefaultPullSetup = 130 * time.Millisecond

// Full is the preset of a full run: four engines with 64-token blocks of
// 1 MiB (16 KiB per token), GPU pools of 768 blocks (49k tokens, three or
// four long agentic contexts: caches matter) in front of runners of 1664
// blocks, in real time: at most 9.5 GiB of simulated KV in all.
func Full() Options {
	return Options{
		Engines: 4, BlockSize: 64, KVBytesPerToken: 16 << 10,
		GPUBlocks: 768, RunnerBlocks: 1664,
		PrefillPerToken: 75 * time.Microsecond, DecodePerToken: 10 * time.Millisecond,
		RestorePerToken: 5 * time.Microsecond, PullSetup: DefaultPullSetup, Speedup: 1,
		Repeats:   1,
		Workload:  WorkloadAgentic,
		Agentic:   fullAgentic(),
		TimeScale: 1,
	}
}

// Quick is Full scaled down to finish in under a minute: the same
// engines at twice the speed, fewer sessions arriving twice as fast, a slice of a trace replayed twice as fast.
func Quick() Options {
	o := Full()
	o.Quick = true
	o.Speedup = 2
	o.Agentic = quickAgentic()
	o.MaxRequests = 100
	o.TimeScale = 2
	return o
}

// fullAgentic: agentic sessions as coding and tool-using agents make
// them, where long prefixes dominate: eight agents' system prompts (with
// their tool definitions) of 8-12k tokens, sessions of four turns each
// adding a 1,024-token tool output or user message. Sessions start in the
// background (one a second, the first eight on each prompt in turn, so
// that every prompt is cached somewhere before a burst on it) and in
// bursts of eight on one prompt every five seconds, more than the
// prompt's holder can serve alone, so that a KV-aware router must move
// sessions away from it: each moved session misses a prefix of 8k+
// tokens, well beyond the pull crossover, that a peer holds.
func fullAgentic() workload.AgenticConfig {
	return workload.AgenticConfig{
		Sessions: 64, Turns: 4, SystemPrompts: 8,
		SystemTokensMin: 8192, SystemTokensMax: 12288,
		UserTokens: 1024, OutputTokens: 64,
		ThinkTime: 2 * time.Second, BurstSize: 8, BurstInterval: 5 * time.Second,
		ArrivalRate: 1, Seed: 1, Vocab: demoVocab, WarmPrompts: true,
	}
}

// quickAgentic is fullAgentic's shape with fewer sessions arriving
// denser, on a timeline compressed like the engines' time: 20 sessions of
// four turns, two background sessions a second and a burst every two
// seconds.
func quickAgentic() workload.AgenticConfig {
	w := fullAgentic()
	w.Sessions, w.Turns = 20, 4
	w.ThinkTime, w.BurstInterval, w.ArrivalRate = time.Second, 2*time.Second, 2
	return w
}

// fill takes the preset's values for what o leaves zero.
func (o *Options) fill() {
	p := Full()
	if o.Quick {
		p = Quick()
	}
	setInt := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	setDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	setInt(&o.Engines, p.Engines)
	setInt(&o.BlockSize, p.BlockSize)
	setInt(&o.KVBytesPerToken, p.KVBytesPerToken)
	setInt(&o.GPUBlocks, p.GPUBlocks)
	setInt(&o.RunnerBlocks, p.RunnerBlocks)
	setInt(&o.Repeats, p.Repeats)
	setInt(&o.MaxRequests, p.MaxRequests)
	setDur(&o.PrefillPerToken, p.PrefillPerToken)
	setDur(&o.DecodePerToken, p.DecodePerToken)
	setDur(&o.RestorePerToken, p.RestorePerToken)
	setDur(&o.PullSetup, p.PullSetup)
	if o.Speedup == 0 {
		o.Speedup = p.Speedup
	}
	if o.TimeScale == 0 {
		o.TimeScale = p.TimeScale
	}
	if o.Workload == "" {
		o.Workload = p.Workload
	}
	fillAgentic(&o.Agentic, p.Agentic)
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Err == nil {
		o.Err = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// fillAgentic takes d's shape for every field w leaves zero.
func fillAgentic(w *workload.AgenticConfig, d workload.AgenticConfig) {
	ints := []struct{ v, d *int }{
		{&w.Sessions, &d.Sessions}, {&w.Turns, &d.Turns}, {&w.SystemPrompts, &d.SystemPrompts},
		{&w.SystemTokensMin, &d.SystemTokensMin}, {&w.SystemTokensMax, &d.SystemTokensMax},
		{&w.UserTokens, &d.UserTokens}, {&w.OutputTokens, &d.OutputTokens}, {&w.BurstSize, &d.BurstSize},
	}
	for _, f := range ints {
		if *f.v == 0 {
			*f.v = *f.d
		}
	}
	if w.ThinkTime == 0 {
		w.ThinkTime = d.ThinkTime
	}
	if w.BurstInterval == 0 {
		w.BurstInterval = d.BurstInterval
	}
	if w.ArrivalRate == 0 {
		w.ArrivalRate = d.ArrivalRate
	}
	if w.Seed == 0 {
		w.Seed = d.Seed
	}
	w.WarmPrompts = w.WarmPrompts || d.WarmPrompts
	if w.Vocab == (workload.Vocab{}) {
		w.Vocab = demoVocab
	}
}

// check validates filled options.
func (o *Options) check() error {
	bad := func(flag string, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrOptions, flag, fmt.Sprintf(format, args...))
	}
	switch {
	case o.Engines < 2:
		return bad("--engines", "%d, want at least 2 (a hint needs a peer)", o.Engines)
	case o.BlockSize < 1:
		return bad("--block-size", "%d, want at least 1", o.BlockSize)
	case o.KVBytesPerToken < 1:
		return bad("--kv-bytes-per-token", "%d, want at least 1", o.KVBytesPerToken)
	case o.GPUBlocks < 1 || o.RunnerBlocks < 1:
		return bad("--gpu-blocks and --runner-blocks", "%d and %d, want at least 1", o.GPUBlocks, o.RunnerBlocks)
	case o.PrefillPerToken < 0 || o.DecodePerToken < 0 || o.RestorePerToken < 0:
		return bad("--prefill-us-per-token, --decode-ms-per-token and --restore-us-per-token", "must not be negative")
	case !(o.Speedup > 0):
		return bad("--speedup", "%v, want a positive factor", o.Speedup)
	case o.HintBandwidthGbps < 0 || o.HintSetup < 0:
		return bad("--hint-bandwidth-gbps and --hint-setup-ms", "must not be negative")
	case o.Repeats < 1:
		return bad("--repeats", "%d, want at least 1", o.Repeats)
	case o.Workload != WorkloadAgentic && o.Workload != WorkloadMooncake:
		return bad("--workload", "%q, want %s or %s", o.Workload, WorkloadAgentic, WorkloadMooncake)
	case o.Trace != "" && o.Workload != WorkloadMooncake:
		return bad("--trace", "given with --workload %s; add --workload %s", o.Workload, WorkloadMooncake)
	case !(o.TimeScale > 0):
		return bad("--time-scale", "%v, want a positive factor", o.TimeScale)
	case o.MaxRequests < 0:
		return bad("--max-requests", "%d is negative", o.MaxRequests)
	}
	_, err := o.policies()
	return err
}

// policies resolves Options.Policies, in the canonical order, and
// Options.Custom after them.
func (o *Options) policies() ([]Policy, error) {
	var names []string
	for _, p := range Policies {
		names = append(names, p.Name)
	}
	for _, n := range o.Policies {
		if !slices.Contains(names, n) {
			return nil, fmt.Errorf("%w: --policies: %q, want a comma-separated subset of %s", ErrOptions, n, strings.Join(names, ","))
		}
	}
	var out []Policy
	for _, p := range Policies {
		if len(o.Policies) == 0 || slices.Contains(o.Policies, p.Name) {
			out = append(out, p)
		}
	}
	for _, c := range o.Custom {
		if slices.ContainsFunc(out, func(p Policy) bool { return p.Name == c.Name }) || slices.Contains(names, c.Name) {
			return nil, fmt.Errorf("%w: --policy %s: the name is taken; give each its own", ErrOptions, c.Name)
		}
		out = append(out, c)
	}
	return out, nil
}

// ParsePolicy reads a --policy value, NAME=FLAGS: a name of letters,
// digits, '_', '.' and '-', and the router service's flags of that
// configuration, split at spaces, e.g.
// "kv_pls2=--routing kv --hint-policy off --prefill-load-scale 2". Flags
// it leaves out take serve's defaults (--routing kv --hint-policy cost).
func ParsePolicy(s string) (Policy, error) {
	name, flags, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return Policy{}, fmt.Errorf("%w: --policy %q: want NAME=FLAGS, e.g. kv_pls2=--routing kv --hint-policy off --prefill-load-scale 2", ErrOptions, s)
	}
	if i := strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-')
	}); i >= 0 {
		return Policy{}, fmt.Errorf("%w: --policy %q: the name may hold letters, digits, '_', '.' and '-' only", ErrOptions, s)
	}
	f := strings.Fields(flags)
	if len(f) == 0 || !strings.HasPrefix(f[0], "-") {
		return Policy{}, fmt.Errorf("%w: --policy %q: want the router service's flags after '=', e.g. --prefill-load-scale 2", ErrOptions, s)
	}
	for _, x := range f {
		if reserved(x) {
			return Policy{}, fmt.Errorf("%w: --policy %q: %s is the benchmark's to set", ErrOptions, s, x)
		}
	}
	return Policy{Name: name, Flags: f}, nil
}

// reserved says whether a router flag is one the benchmark sets for every
// policy alike (where to listen, the cluster, the tokenizer).
func reserved(flag string) bool {
	name, _, _ := strings.Cut(strings.TrimLeft(flag, "-"), "=")
	switch name {
	case "listen", "admin-listen", "nats", "tokenizer", "replica", "log-level":
		return strings.HasPrefix(flag, "-")
	}
	return false
}
