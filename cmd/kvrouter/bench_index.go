// This file holds `kvrouter bench index`: the inventory index's apply rate, match latency, memory.

package main

import (
	"encoding/json"

	"github.com/spf13/cobra"

	"kvrouter/internal/index/indexbench"
)

func init() { benchCommands = append(benchCommands, newBenchIndexCmd) }

func newBenchIndexCmd() *cobra.Command {
	cfg := indexbench.Config{Sources: 1000, Blocks: 1_000_000, PromptBlocks: 128, Seed: 1}
	matches := 20000
	var asJSON, quick bool
	cmd := &cobra.Command{
		Use:   "index",
		Short: "Measure the inventory index: apply rate, match latency, memory",
		Long: `Generates a realistic inventory workload (sources in groups of 16 sharing
system prompts, multi-turn conversations that mostly stay on one source, and
hot prompts every source holds a prefix of), applies it to a fresh index on
one goroutine, and reports:

  apply_blocks_per_s        block events applied per second, one writer
  match_p50_us, p99         latency of matching a conversation prompt
                            (at most 16 sources share any prefix); its local
                            hashes are in cache, as the router's are, its
                            index nodes are not
  match_p99_us_all_sources  latency of matching a hot prompt that every
                            source holds a prefix of
  bytes_per_block_source    memory added by the index divided by (block,
                            source) pairs: heap_bytes (Go heap after GC) plus
                            mapped_bytes (its large tables, mapped outside the
                            heap on huge pages)
  host_stalls_per_s, host_stall_p50_us
                            how often, and for how long, the host took the CPU
                            from a thread spinning on the clock just before the
                            matches (gaps over 2 µs). A match that overlaps a
                            stall takes that much longer, so once more than 1%
                            of matches do (p50 × stalls/s > 10^4), p99 measures
                            the host rather than the index.

The run takes a few seconds and about 300 MB at the defaults; use --quick for a
small version. Latencies are wall clock, so other load on the machine shows.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if quick {
				cfg.Sources, cfg.Blocks, matches = 100, 50_000, 2000
			}
			res, err := indexbench.Run(cfg, matches)
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
	f.IntVar(&cfg.Sources, "sources", cfg.Sources, "worker ranks holding blocks")
	f.IntVar(&cfg.Blocks, "blocks", cfg.Blocks, "distinct blocks to index")
	f.IntVar(&cfg.PromptBlocks, "prompt-blocks", cfg.PromptBlocks, "longest prompt, in blocks")
	f.IntVar(&matches, "matches", matches, "conversation prompts to time (hot prompts: a tenth of it)")
	f.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "workload seed; a run is reproducible from it")
	f.BoolVar(&asJSON, "json", false, "print one JSON object instead of a table")
	f.BoolVar(&quick, "quick", false, "small run: 100 sources, 50,000 blocks, 2,000 matches (overrides those flags)")
	return cmd
}
