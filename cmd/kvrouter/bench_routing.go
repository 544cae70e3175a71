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
		pd                      bool
		custom                  []string
		pdFlavor                string
		pdThreshold             int
	)
	cmd := &cobra.Command{
		Use:   "routing",
		Short: "Compare routing policies on a local cluster: recomputed tokens and time to first token",
		Long: fmt.Sprintf(`routing starts a local cluster (an embedded NATS server, --engines simulated
engines 'kvrouter mocker' each with a real KV cache runner and a state agent)
and sends the same workload through a router service once per policy (and repeat):

  round_robin   --routing round-robin --hint-policy off
  random        --routing random --hint-policy off
  least_loaded  --routing least-loaded --hint-policy off
  kv            --routing kv --hint-policy off
  kv_hints      --routing kv --hint-policy cost

Before each policy every engine is reset (POST /admin/reset: GPU pool and
runner) and a fresh router service is started, and the run waits until its
index is empty: every policy starts cold on the same engines, and only the
router service's flags differ.

No calibration. Every router starts with the cost policy's documented prior
(an RDMA-class fleet) and learns from the engines' answers: each hinted
request's usage reports what its pull cost (usage.kvrouter.pull), and every
answer's time to first token against the prompt tokens it recomputed gives
each target's recompute rate. Nothing is measured before the run and no hint
flag is passed; --hint-bandwidth-gbps and --hint-setup-ms fix those figures
instead, for a comparison with a router told the answer. The report prints
what the kv_hints router had learned by the end of each run, beside what the
engines really cost.

Repeats. --repeats N runs every policy N times, on seeds --seed .. --seed+N-1,
each repeat running every policy (in a rotated order) before the next starts,
so that a change in the host's load hits the policies alike. The figures are
the medians over the repeats, the table shows the range of TTFT p90 and of
recomputed tokens, and a comparison whose repeats spread wider than the
medians differ is called not conclusive. --json adds "runs" (each repeat's own
figures) and "comparisons".

More configurations. --policy NAME=FLAGS adds one, run after the chosen
--policies in every repeat and reported beside them: its router service
flags (the cost weights --overlap-credit, --prefill-load-scale,
--request-weight, --temperature, ...; serve's defaults for the rest, which
hint with the cost policy). A sweep of kv's weights is how a gain of
kv_hints is shown to be the hint's and not a weak baseline's.

The fixed cost of a pull. On a real fleet a pull pays a fixed cost before its
first byte moves: the transfer engine's setup (memory registration, connection
or queue pair), the source scheduling the read beside its own batch, control
round trips over a real network. That is why pulling beats recomputing only
beyond a crossover of a few thousand tokens. Loopback has next to none of it,
so the engines simulate it: each waits --pull-setup-ms (divided by --speedup,
like every simulated cost) before a pull, whose blocks then really move over
TCP; the router learns it back from the pulls it causes. With the defaults
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
requests at --time-scale %g: under a minute in all.

Reports per policy: TTFT p50/p90/p99, e2e p50, output tokens/s, the share of
prompt tokens found in the worker's own cache and pulled from a peer, tokens
recomputed, hints issued and skipped (the router's /metrics; a hint-less
policy skips every request), errors; then kv_hints' TTFT p90 against every
other policy's, and the machine's load average. --json prints
{"workload", "policies", "ratios", "comparisons", "runs", "config"}. --plot writes the TTFT CDF of
every policy as SVG. Progress goes to stderr. Ctrl-C stops every process.

--pd compares serving modes instead of policies, on one workload and the same
number of engines, KV-aware routing without hints in each: aggregated (every
engine serves whole requests), disaggregated (one prefill engine, the others
decode engines, every request in two legs: 'kvrouter mocker --role') and
conditional (the same fleet; a decode worker that would compute fewer than
--pd-local-prefill-tokens prompt tokens itself runs the request alone). It
reports TTFT and inter-token latency (ITL: per request, (e2e - TTFT) / (output
tokens - 1)) p50 and p90 side by side: what disaggregation buys is decode steps
that no long prefill holds up. --pd-flavor picks the engines (vllm by default;
sglang's decode servers cannot run a request alone, so its conditional mode is
not run). --pull-setup-ms applies to the prefill-to-decode hand-over too.
--json prints {"flavor", "engines", "runs", "config"}.`,
			fw.Sessions, fw.Turns, fw.SystemPrompts, fw.SystemTokensMin, fw.SystemTokensMax, fw.UserTokens,
			fw.BurstSize, fw.BurstInterval, qw.Sessions, qw.Turns, qw.BurstInterval,
			quick.MaxRequests, quick.TimeScale),
		Example: `  kvrouter bench routing
  kvrouter bench routing --quick
  kvrouter bench routing --workload mooncake --trace mooncake.jsonl --json
  kvrouter bench routing --policies kv,kv_hints --plot /tmp/ttft.svg
  kvrouter bench routing --policies kv,kv_hints --repeats 3 \
      --policy 'kv_pls2=--hint-policy off --prefill-load-scale 2'
  kvrouter bench routing --pd --quick --engines 3`,
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
			for _, c := range custom {
				p, err := policybench.ParsePolicy(c)
				if err != nil {
					return err
				}
				o.Custom = append(o.Custom, p)
			}
			if pd {
				_, err := policybench.RunPD(ctx, policybench.PDOptions{Options: o, Flavor: pdFlavor, LocalPrefillTokens: pdThreshold})
				return err
			}
			_, err := policybench.Run(ctx, o)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Workload, "workload", policybench.WorkloadAgentic, "agentic (synthetic multi-turn sessions with bursts) or mooncake (a trace replay)")
	f.StringVar(&o.Trace, "trace", "", "Mooncake JSONL trace for --workload mooncake; empty replays the embedded small trace")
	f.BoolVar(&o.Quick, "quick", false, "scaled-down presets that finish in under a minute")
	f.StringSliceVar(&o.Policies, "policies", nil, "comma-separated policies to run (default all: round_robin,random,least_loaded,kv,kv_hints)")
	f.StringArrayVar(&custom, "policy", nil, "run one more configuration, NAME=FLAGS: its name and router service flags, e.g. 'kv_pls2=--routing kv --hint-policy off --prefill-load-scale 2' (repeatable; a sweep of the cost weights)")
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
	f.Float64Var(&o.HintBandwidthGbps, "hint-bandwidth-gbps", 0, "fix the routers' peer pull rate, Gbit/s, instead of letting them learn it")
	f.Float64Var(&setupMS, "hint-setup-ms", 0, "fix the routers' pull setup cost, wall ms, instead of letting them learn it")
	f.IntVar(&o.Repeats, "repeats", 1, "run every policy this many times, on seeds --seed, --seed+1, ...; report medians and ranges")
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
	f.BoolVar(&pd, "pd", false, "compare serving modes (aggregated, disaggregated, conditional) instead of routing policies")
	f.StringVar(&pdFlavor, "pd-flavor", "vllm", "--pd: engines imitated, vllm or sglang")
	f.IntVar(&pdThreshold, "pd-local-prefill-tokens", 0, "--pd: the conditional mode's threshold (serve --pd-local-prefill-tokens); 0 takes serve's default")
	f.BoolVar(&verbose, "verbose", false, "log the cluster's start and stop")
	return cmd
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
