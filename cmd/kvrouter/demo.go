// This file holds `kvrouter demo`: a whole local cluster, its workload and the seed scenario.

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"kvrouter/internal/demo"
)

func init() { commands = append(commands, newDemoCmd) }

// errSeedFailed, errPDFailed and errTenantsFailed exit 1 after the
// scenario's JSON was printed.
var (
	errSeedFailed    = errors.New("seed scenario failed: see the steps marked \"ok\": false")
	errPDFailed      = errors.New("pd scenario failed: a flavour has errors, answers unlike an aggregated engine's, or no prefill leg")
	errTenantsFailed = errors.New("tenants scenario failed: a block crossed tenants, a salted tenant reused nothing of its own, or a request failed")
)

func newDemoCmd() *cobra.Command {
	var (
		o        demo.Options
		scenario string
		quick    = demo.Workload()
		verbose  bool
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a whole kvrouter cluster on this machine and send it a multi-turn workload",
		Long: `demo starts a complete kvrouter deployment on this machine, every part a
separate process on 127.0.0.1: an embedded NATS server (in this process),
--engines simulated engines ('kvrouter mocker', each with a real KV cache
runner serving its peers over TCP), one state agent per engine ('kvrouter
agent', registering the worker and relaying its KV events over NATS) and the
router service ('kvrouter serve').

It then sends a synthetic multi-turn agentic workload through the router:
sessions that share system prompts, with bursts of sessions on one prompt that
overload the worker holding it, so that the router moves sessions elsewhere
and hints where to pull their prefix from. A progress bar runs on stderr (when
it is a terminal); then a summary: requests, errors, the share of prompt tokens
found in the worker's own cache, tokens pulled from a peer, hints issued (from
the router's /metrics), and time to first token.

With --keep the cluster stays up after the run, until Ctrl-C, for a look at
the router's operator views on its --admin-listen port (printed at the end):
/debug/workers, /debug/route and /metrics. Every process's log is
kept in --log-dir (default a new temporary directory, printed at the end).
Ctrl-C stops every process the demo started, at any time.

--scenario seed replays the upstream peer-restore validation instead: two
workers A and B (64-token blocks); a 2,000-token prompt forced to A (header
x-kvrouter-target); the same prompt forced to B, which must get a hint naming
A's runner and restore at least 1,984 tokens from it with the same output;
then the blocks are evicted from A (GPU and runner) and from B, and once the
removals reach the router it must attach no hint. It prints one JSON object
{"restored_tokens", "output_match", "peer_hint_after_eviction", "hint",
"steps"} and exits 0 only when every check holds. It reads --flavor, --log-dir
and --json; the other flags shape the workload run.

--scenario pd serves disaggregated, for each flavour in turn: one prefill and
two decode engines ('kvrouter mocker --role prefill|decode') behind the router,
which runs each request's prefill leg and decode leg in the engine's protocol
(vLLM: kv_transfer_params; SGLang: bootstrap_host/port/room); the decode engine
pulls the prompt's KV from the prefill's runner over TCP. Multi-turn sessions
(12 x 4 turns, a 3,000-token context growing 40 tokens a turn) let a vLLM decode
worker that holds the conversation run later turns alone (the prefill leg
skipped); SGLang's decode servers cannot. Every answer is compared with an
aggregated engine's, run in this process off the router. It prints
{"flavours": {"vllm": {...}, "sglang": {...}}}, each with requests, errors,
prefill_legs, skipped_prefill_legs, fallbacks, outputs_identical_to_aggregated,
decode_pulled_tokens and ttft_p50_ms, and exits 0 only when both flavours had
no error, only aggregated answers and prefill legs. It reads --log-dir,
--speedup and --json.

--scenario tenants runs, for each engine flavour (vllm, then sglang), three
workers and salted ("tenant-a", "tenant-b") and unsalted requests sharing
two system prompts of 2,048 tokens, each forced to a worker: tenant-a's
prompt lands on A, whose GPU copy is evicted so that only its runner holds
it; then the other tenants ask for the same prompt where only another
tenant's copy exists, and tenant-a asks on B, where its own copy on A is
worth pulling. It prints {"flavours": {"vllm": {...}, "sglang": {...}}},
each with requests, errors, hints, cross_tenant_hints and
cross_tenant_restored_tokens (a hint or restore whose source never served
the request's tenant that prompt, or that named blocks outside the
request's chain: must be 0) and same_tenant_restored_tokens (must be > 0),
and exits 0 only when both hold for both flavours. It reads --log-dir and
--json.`,
		Example: `  kvrouter demo
  kvrouter demo --keep
  kvrouter demo --engines 4 --sessions 64 --json
  kvrouter demo --flavor vllm --log-dir ./demo-logs
  kvrouter demo --scenario seed --json
  kvrouter demo --scenario pd --json
  kvrouter demo --scenario tenants --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := interruptible(cmd)
			defer stop()
			o.Logger = stderrLogger(cmd, verbosity(verbose))
			switch scenario {
			case "seed", "pd", "tenants":
				var res interface{ OK() bool }
				var err error
				fail := errSeedFailed
				switch scenario {
				case "seed":
					res, err = demo.Seed(ctx, demo.SeedOptions{Flavor: o.Flavor, LogDir: o.LogDir, Logger: o.Logger})
				case "pd":
					res, err = demo.PD(ctx, demo.PDOptions{LogDir: o.LogDir, Speedup: o.Speedup, Logger: o.Logger, Err: cmd.ErrOrStderr()})
					fail = errPDFailed
				default:
					res, err = demo.Tenants(ctx, demo.TenantsOptions{LogDir: o.LogDir, Logger: o.Logger})
					fail = errTenantsFailed
				}
				if err != nil {
					return err
				}
				enc := json.NewEncoder(cmd.OutOrStdout())
				if !o.JSON {
					enc.SetIndent("", "  ")
				}
				if err := enc.Encode(res); err != nil {
					return err
				}
				if !res.OK() {
					return fail
				}
				return nil
			case "", "workload":
			default:
				return fmt.Errorf("--scenario %q: want workload (the default), seed, pd or tenants", scenario)
			}
			o.Workload = quick
			o.Out, o.Err = cmd.OutOrStdout(), cmd.ErrOrStderr()
			o.TTY = isTerminal(os.Stderr)
			_, err := demo.Run(ctx, o)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&scenario, "scenario", "workload", "workload (the multi-turn run), seed (the upstream peer-restore validation, two workers), pd (disaggregated serving, both flavours) or tenants (salted and unsalted tenants sharing prompts: nothing may cross tenants)")
	f.IntVar(&o.Engines, "engines", demo.DefaultEngines, "simulated engines, each with its state agent")
	f.StringVar(&o.Flavor, "flavor", "sglang", "engine imitated: sglang or vllm")
	f.IntVar(&o.TP, "tp", 1, "tensor-parallel ranks per engine (one runner shard each)")
	f.Float64Var(&o.Speedup, "speedup", 1, "simulated engine time runs this many times faster than the wall (peer pulls take their real time)")
	f.IntVar(&quick.Sessions, "sessions", quick.Sessions, "conversations in the workload")
	f.IntVar(&quick.Turns, "turns", quick.Turns, "requests per conversation")
	f.IntVar(&quick.BurstSize, "burst", quick.BurstSize, "sessions starting together on one system prompt every --burst-interval")
	f.DurationVar(&quick.BurstInterval, "burst-interval", quick.BurstInterval, "time between bursts")
	f.Float64Var(&quick.ArrivalRate, "rate", quick.ArrivalRate, "background sessions started per second")
	f.IntVar(&quick.OutputTokens, "output-tokens", quick.OutputTokens, "max_tokens of every request")
	f.Uint64Var(&quick.Seed, "seed", quick.Seed, "workload seed: the same seed sends the same requests")
	f.BoolVar(&o.Keep, "keep", false, "keep the cluster running after the run, until Ctrl-C")
	f.BoolVar(&o.JSON, "json", false, "print the summary as JSON (the seed scenario's on one line)")
	f.StringVar(&o.LogDir, "log-dir", "", "directory for the processes' logs; default a new temporary directory")
	f.BoolVar(&verbose, "verbose", false, "log the cluster's start and stop")
	return cmd
}

// isTerminal reports whether f is a character device, where a progress bar
// redrawn with \r shows as one line.
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
