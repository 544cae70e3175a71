// This file holds `kvrouter bench transfer` and its source process: runner pull bandwidth.

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"

	"github.com/spf13/cobra"

	"kvrouter/internal/runner/transferbench"
)

func init() { benchCommands = append(benchCommands, newTransferCmd, newTransferSourceCmd) }

func transferFlags(cmd *cobra.Command, cfg *transferbench.Config) {
	cmd.Flags().IntVar(&cfg.BlockBytes, "block-bytes", transferbench.DefaultBlockBytes, "bytes per KV block (Qwen3-32B BF16 is 4 MiB per 16-token block)")
	cmd.Flags().IntVar(&cfg.Blocks, "blocks", transferbench.DefaultBlocks, "blocks pulled per round; each process holds block-bytes × blocks in memory")
	cmd.Flags().IntVar(&cfg.SocketBuffer, "socket-buffer", 0, "SO_SNDBUF/SO_RCVBUF bytes for both streams; 0 keeps the kernel's autotuning")
}

func newTransferCmd() *cobra.Command {
	var cfg transferbench.Config
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "transfer",
		Short: "Measure the runner's peer pull bandwidth against a plain TCP copy",
		Long: `transfer starts a second kvrouter process as the source runner, fills it with
--blocks blocks of --block-bytes each, and pulls them all into a runner in this
process over the runner's peer protocol (framed, checksummed, committed into the
pool), alternating with a plain single-stream TCP copy of the same bytes between
the same two processes. After one warm-up round it reports the median of --rounds
rounds of each, in gigabits per second, and their ratio (pull / copy).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			exe, err := os.Executable()
			if err != nil {
				exe = os.Args[0]
			}
			child := exec.CommandContext(cmd.Context(), exe, "bench", "transfer-source",
				"--block-bytes", strconv.Itoa(cfg.BlockBytes), "--blocks", strconv.Itoa(cfg.Blocks),
				"--socket-buffer", strconv.Itoa(cfg.SocketBuffer))
			child.Stderr = os.Stderr
			res, err := transferbench.Run(cmd.Context(), cfg, child)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return json.NewEncoder(out).Encode(res)
			}
			fmt.Fprintf(out, "block bytes     %d\n", res.BlockBytes)
			fmt.Fprintf(out, "blocks          %d (%d rounds, median)\n", res.Blocks, res.Rounds)
			fmt.Fprintf(out, "runner pull     %.2f Gbit/s\n", res.PullGbps)
			fmt.Fprintf(out, "plain TCP copy  %.2f Gbit/s\n", res.TCPCopyGbps)
			fmt.Fprintf(out, "ratio           %.3f\n", res.Ratio)
			return nil
		},
	}
	transferFlags(cmd, &cfg)
	cmd.Flags().IntVar(&cfg.Rounds, "rounds", transferbench.DefaultRounds, "measured rounds of each transfer, after one warm-up round")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object instead of a table")
	return cmd
}

// newTransferSourceCmd is the source process 'bench transfer' starts.
func newTransferSourceCmd() *cobra.Command {
	var cfg transferbench.Config
	cmd := &cobra.Command{
		Use:    "transfer-source",
		Short:  "Source process of 'bench transfer' (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return transferbench.Serve(cmd.Context(), cfg, os.Stdin, cmd.OutOrStdout())
		},
	}
	transferFlags(cmd, &cfg)
	return cmd
}
