// This file holds `kvrouter bench routing`: routing policies compared on a local cluster.

package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"kvrouter/internal/policybench"
)

func init() { benchCommands = append(benchCommands, newBenchRoutingCmd) }

func newBenchRoutingCmd() *cobra.Command {
	var (
		o                       policybench.Options
		prefillUS, decodeMS     float64
		restoreUS, setupMS      float64
		pullSetupMS             float64
		verbose                 bool
		full, quick             = policybench.Full(), policybench.Quick()
		fw, qw                  = full.Agentic, quick.Agentic
		think, burstEvery       time.Duration
		sessions, turns, burst  int
		prompts, sysMin, sysMax int
		userTokens, outTokens   int
		rate                    float64
		seed                    uint64
	)
	cmd := &cobra.Command{
		Use:   "routing",
		Short: "Compare routing policies on a local cluster: recomputed tokens and time to first token",
		Long: fmt.Sprintf(`routing starts a local cluster (an embedded NATS server, --engines simulated
engines 'kvrouter mocker' each with a real KV cache runner and a state agent)
and sends the same workload through a router service once per policy:

  round_robin   --routing round-robin --hint-policy off
  random        --routing random --hint-policy off
  least_loaded  --routing least-loaded --hint-policy off
  kv            --routing kv --hint-policy off
  kv_hints      --routing kv --hint-policy cost

Before each policy every engine is reset (POST /admin/reset: GPU pool and
runner) and a fresh router service is started, and the run waits until its
index is empty: every policy starts cold on the same engines, and only the
router service's flags differ.

Calibration. The cost policy hints when setup + bytes/bandwidth is below
tokens/prefill_rate, so every term is set to what the engines really cost in
wall time. --hint-prefill-tokens-per-s = 1e6 / --prefill-us-per-token ×
--speedup (simulated time runs --speedup times faster; a pull's transfer takes
its real time). The pull's fixed cost and rate are measured first, in this very
cluster: a calibration router forces prompts of 2, 12 and 48 blocks onto engine
A, then onto B with a hint, and B's peer-pull histogram gives each pull's wall
time; a line through the medians gives --hint-setup-ms (intercept) and the
transfer rate (slope). The engine's restore of a pulled token
(--restore-us-per-token / --speedup) is folded into --hint-bandwidth-gbps, the
policy having no term of its own for it. The resulting crossover (the extra
prefix length beyond which a pull wins) is printed, with the recompute rate the
probes saw as a check (the mocker's real CPU work per block, filling and hashing
its KV bytes, is part of the simulated time; it shows only where it outlasts
it, on a host too busy to keep up, and the report warns below 90%%).
--hint-bandwidth-gbps skips the measurement.

The fixed cost of a pull. On a real fleet a pull pays a fixed cost before its
first byte moves: the transfer engine's setup (memory registration, connection
or queue pair), the source scheduling the read beside its own batch, control
round trips over a real network. That is why pulling beats recomputing only
beyond a crossover of a few thousand tokens. Loopback has next to none of it,
so the engines simulate it: each waits --pull-setup-ms (divided by --speedup,
like every simulated cost) before a pull, whose blocks then really move over
TCP, and the probe pulls measure it back as the intercept. With the defaults
(64-token blocks of 1 MiB, 75 µs per token, 130 ms) and pulls at ~7.5 Gbit/s
on a 2-core VM, a token costs ~17 µs to pull plus 5 µs to restore against 75
µs to recompute, a gain of ~53 µs: the crossover is about 130 ms / 53 µs =
2,500 tokens, and kv_hints hints only a longer missing prefix. --pull-setup-ms
0 gives plain loopback, where the crossover is a few tokens.

Presets (a flag left at 0 takes them): full %d sessions x %d turns on %d
system prompts of %d-%d tokens, %d new tokens a turn, bursts of %d
every %v (agentic sessions whose long prefixes dominate; the first background
sessions take each prompt in turn, so that no burst lands on a prompt no
engine has seen); --quick %d x %d, bursts every %v, the trace cut to %d
requests at --time-scale %g, one probe pull per size: under a minute in all.

Reports per policy: TTFT p50/p90/p99, e2e p50, output tokens/s, the share of
prompt tokens found in the worker's own cache and pulled from a peer, tokens
recomputed, hints issued and skipped (the router's /metrics; a hint-less
policy skips every request), errors; then kv_hints' TTFT p90 against every
other policy's. --json prints
{"workload", "policies", "ratios", "config"}. --plot writes the TTFT CDF of
every policy as SVG. Progress goes to stderr. Ctrl-C stops every process.`,
			fw.Sessions, fw.Turns, fw.SystemPrompts, fw.SystemTokensMin, fw.SystemTokensMax, fw.UserTokens,
			fw.BurstSize, fw.BurstInterval, qw.Sessions, qw.Turns, qw.BurstInterval,
			quick.MaxRequests, quick.TimeScale),
		Example: `  kvrouter bench routing
  kvrouter bench routing --quick
  kvrouter bench routing --workload mooncake --trace mooncake.jsonl --json
  kvrouter bench routing --policies kv,kv_hints --plot /tmp/ttft.svg`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := interruptible(cmd)
			defer stop()
			o.Logger = stderrLogger(cmd, verbosity(verbose))
			o.PrefillPerToken = time.Duration(prefillUS * float64(time.Microsecond))
			o.DecodePerToken = time.Duration(decodeMS * float64(time.Millisecond))
			o.RestorePerToken = time.Duration(restoreUS * float64(time.Microsecond))
			o.HintSetup = time.Duration(setupMS * float64(time.Millisecond))
			o.PullSetup = time.Duration(pullSetupMS * float64(time.Millisecond))
			if pullSetupMS == 0 {
				o.PullSetup = -1 // none, rather than the preset's
			}
			o.Agentic.Sessions, o.Agentic.Turns, o.Agentic.BurstSize = sessions, turns, burst
			o.Agentic.ThinkTime, o.Agentic.BurstInterval = think, burstEvery
			o.Agentic.ArrivalRate, o.Agentic.Seed = rate, seed
			o.Agentic.SystemPrompts, o.Agentic.SystemTokensMin, o.Agentic.SystemTokensMax = prompts, sysMin, sysMax
			o.Agentic.UserTokens, o.Agentic.OutputTokens = userTokens, outTokens
			o.Out, o.Err = cmd.OutOrStdout(), cmd.ErrOrStderr()
			o.TTY = isTerminal(os.Stderr)
			_, err := policybench.Run(ctx, o)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Workload, "workload", policybench.WorkloadAgentic, "agentic (synthetic multi-turn sessions with bursts) or mooncake (a trace replay)")
	f.StringVar(&o.Trace, "trace", "", "Mooncake JSONL trace for --workload mooncake; empty replays the embedded small trace")
	f.BoolVar(&o.Quick, "quick", false, "scaled-down presets that finish in under a minute")
	f.StringSliceVar(&o.Policies, "policies", nil, "comma-separated policies to run (default all: round_robin,random,least_loaded,kv,kv_hints)")
	f.BoolVar(&o.JSON, "json", false, "print the report as JSON on stdout (the table then goes to stderr)")
	f.StringVar(&o.Plot, "plot", "bench-routing-ttft.svg", "write the TTFT CDF per policy as SVG to this file (relative to the current directory); empty writes none")
	f.IntVar(&o.Engines, "engines", full.Engines, "simulated engines, each with its runner and state agent")
	f.IntVar(&o.BlockSize, "block-size", full.BlockSize, "tokens per KV block")
	f.IntVar(&o.KVBytesPerToken, "kv-bytes-per-token", full.KVBytesPerToken, "bytes of KV per token, engines and router alike (a block is this × --block-size)")
	f.IntVar(&o.GPUBlocks, "gpu-blocks", full.GPUBlocks, "GPU KV blocks per engine: small, so that caches matter")
	f.IntVar(&o.RunnerBlocks, "runner-blocks", full.RunnerBlocks, "blocks of each engine's runner (host DRAM tier, the source of peer pulls)")
	f.Float64Var(&prefillUS, "prefill-us-per-token", us(full.PrefillPerToken), "simulated prefill cost per computed prompt token, µs")
	f.Float64Var(&decodeMS, "decode-ms-per-token", float64(full.DecodePerToken)/float64(time.Millisecond), "simulated cost of one engine step (inter-token latency), ms")
	f.Float64Var(&restoreUS, "restore-us-per-token", us(full.RestorePerToken), "simulated cost of copying a restored token into the GPU pool, µs")
	f.Float64Var(&pullSetupMS, "pull-setup-ms", ms(full.PullSetup), "simulated fixed cost of every peer pull, ms (mocker --pull-setup-ms; wall time = this / --speedup): a real fleet's transfer setup, which loopback lacks; 0 adds none")
	f.Float64Var(&o.Speedup, "speedup", 0, fmt.Sprintf("simulated time runs this many times faster than the wall; 0 takes the preset (%g, --quick %g)", full.Speedup, quick.Speedup))
	f.Float64Var(&o.HintBandwidthGbps, "hint-bandwidth-gbps", 0, "peer pull rate (Gbit/s, transfer alone) instead of measuring it; the restore is still folded in")
	f.Float64Var(&setupMS, "hint-setup-ms", 0, "fixed cost of a pull the router assumes, wall ms; 0 takes the measured one (with --hint-bandwidth-gbps, --pull-setup-ms / --speedup)")
	f.IntVar(&o.ProbeRepeats, "probe-repeats", 0, fmt.Sprintf("calibration pulls per size; 0 takes the preset (%d, --quick %d)", full.ProbeRepeats, quick.ProbeRepeats))
	f.IntVar(&sessions, "sessions", 0, fmt.Sprintf("agentic: conversations; 0 takes the preset (%d, --quick %d)", fw.Sessions, qw.Sessions))
	f.IntVar(&turns, "turns", 0, fmt.Sprintf("agentic: requests per conversation; 0 takes the preset (%d, --quick %d)", fw.Turns, qw.Turns))
	f.IntVar(&prompts, "system-prompts", 0, fmt.Sprintf("agentic: distinct shared system prompts; 0 takes the preset (%d)", fw.SystemPrompts))
	f.IntVar(&sysMin, "system-tokens-min", 0, fmt.Sprintf("agentic: shortest system prompt, tokens; 0 takes the preset (%d)", fw.SystemTokensMin))
	f.IntVar(&sysMax, "system-tokens-max", 0, fmt.Sprintf("agentic: longest system prompt, tokens; 0 takes the preset (%d)", fw.SystemTokensMax))
	f.IntVar(&userTokens, "user-tokens", 0, fmt.Sprintf("agentic: new tokens per turn (user message, tool output); 0 takes the preset (%d)", fw.UserTokens))
	f.IntVar(&outTokens, "output-tokens", 0, fmt.Sprintf("agentic: max_tokens of every request; 0 takes the preset (%d)", fw.OutputTokens))
	f.IntVar(&burst, "burst", 0, fmt.Sprintf("agentic: sessions starting together on one system prompt; 0 takes the preset (%d)", fw.BurstSize))
	f.DurationVar(&burstEvery, "burst-interval", 0, fmt.Sprintf("agentic: time between bursts; 0 takes the preset (%v, --quick %v)", fw.BurstInterval, qw.BurstInterval))
	f.DurationVar(&think, "think", 0, fmt.Sprintf("agentic: mean time between a session's turns; 0 takes the preset (%v, --quick %v)", fw.ThinkTime, qw.ThinkTime))
	f.Float64Var(&rate, "rate", 0, fmt.Sprintf("agentic: background sessions started per second; 0 takes the preset (%g, --quick %g)", fw.ArrivalRate, qw.ArrivalRate))
	f.Uint64Var(&seed, "seed", 0, fmt.Sprintf("agentic: workload seed; 0 takes the preset (%d)", fw.Seed))
	f.Float64Var(&o.TimeScale, "time-scale", 0, fmt.Sprintf("mooncake: replay this many times faster; 0 takes the preset (%g, --quick %g)", full.TimeScale, quick.TimeScale))
	f.IntVar(&o.MaxRequests, "max-requests", 0, fmt.Sprintf("mooncake: replay the first this many requests; 0 takes the preset (all, --quick %d)", quick.MaxRequests))
	f.StringVar(&o.Records, "records", "", "write every request's figures (TTFT, cache hits, ...) here, one <policy>.jsonl each")
	f.StringVar(&o.LogDir, "log-dir", "", "keep every process's log here; default a temporary directory, removed after a clean run")
	f.BoolVar(&verbose, "verbose", false, "log the cluster's start and stop")
	return cmd
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
