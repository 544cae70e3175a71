// This file holds `kvrouter bench router`: the router service's own cost per routed request.

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"kvrouter/internal/servebench"
)

func init() { benchCommands = append(benchCommands, newBenchRouterCmd) }

func newBenchRouterCmd() *cobra.Command {
	var gcPercent *int
	cfg := servebench.DefaultConfig()
	var asJSON bool
	var profile, memProfile string
	cmd := &cobra.Command{
		Use:   "router",
		Short: "Measure the router service's own cost: routed requests/s, added latency, CPU, memory",
		Long: `Starts the router service on loopback (as 'kvrouter serve' would, with its embedded
NATS), registers --workers worker ranks through discovery the way state agents
do (--dp ranks per worker, each rank with a cache owner and a hint endpoint),
relays their caches over the event plane (system prompts shared by slices of
the fleet, conversations spread over the ranks), points every worker at a null
engine that answers each completion at once, and drives the router over HTTP
keep-alive with a closed-loop client of --concurrency connections. Reported:

  routed_rps            requests answered through the router per second
  added_p50_us, p99     router-side time from the handler's start to the
                        upstream request written, tokenization excluded
  tokenize_p50_us       tokenization (0-ish with token-id prompts)
  cpu_s_per_1k          process CPU seconds per 1,000 routed requests
  rss_mb                the process's resident set

The client and the null engine run in the same process and share its cores;
they speak HTTP/1.1 on the socket themselves (as wrk would) so as to take
little of them, while the router serves and forwards as it does in service. A
second phase drives the same client straight at the null engine, and
router_cpu_s_per_1k is the difference. Prompts are token ids unless --text or
--tokenizer: then English words for the router to tokenize, with the embedded
demo vocabulary or the --tokenizer given (mean_prompt_tokens says how many
tokens they come to).
The run takes setup time plus --warmup plus twice --duration.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The router service runs in this process: collect as kvrouter serve does.
			if err := applyGC(*gcPercent); err != nil {
				return err
			}
			for _, p := range []struct {
				flag, path string
				w          *io.Writer
			}{{"--cpuprofile", profile, &cfg.Profile}, {"--memprofile", memProfile, &cfg.MemProfile}} {
				if p.path == "" {
					continue
				}
				f, err := os.Create(p.path)
				if err != nil {
					return fmt.Errorf("%s: %w", p.flag, err)
				}
				defer f.Close()
				*p.w = f
			}
			res, err := servebench.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
			}
			return res.WriteTable(cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	gcPercent = gcFlag(f)
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "worker ranks to register")
	f.IntVar(&cfg.DP, "dp", cfg.DP, "data-parallel ranks per registered worker")
	f.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long to drive the router (and then the null engine alone)")
	f.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "unmeasured load before the run")
	f.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "client connections, each sending its next request when answered")
	f.IntVar(&cfg.PromptTokens, "prompt-tokens", cfg.PromptTokens, "prompt length: a third system prompt, half history, the rest a new turn")
	f.BoolVar(&cfg.Text, "text", false, "send prompts as text for the router to tokenize (default: token ids), with the demo tokenizer unless --tokenizer")
	f.BoolVar(&cfg.NoPrefixCache, "no-prefix-cache", false, "tokenize every text prompt whole: the client cycles through 2,048 request bodies, so the tokenizer's prefix cache hits more than with real traffic")
	f.StringVar(&cfg.Tokenizer, "tokenizer", "", "the router's tokenizer for text prompts, as 'kvrouter serve --tokenizer' takes it: a tokenizer.json or model directory (implies --text)")
	f.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "workload seed")
	f.StringVar(&profile, "cpuprofile", "", "write a CPU profile of the routed phase to this file")
	f.StringVar(&memProfile, "memprofile", "", "write the routed phase's allocations (pprof allocs, -sample_index=alloc_space) to this file")
	f.BoolVar(&asJSON, "json", false, "print one JSON object instead of a table")
	return cmd
}
