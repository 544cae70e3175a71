// Command kvrouter routes LLM inference requests to the worker that holds
// the longest cached prefix and tells it where to pull the rest from.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// Each subcommand lives in its own file and registers itself here, so that
// commands can be added without touching this file.
var (
	commands      []func() *cobra.Command
	benchCommands []func() *cobra.Command
)

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "kvrouter",
		Short: "KV-cache-aware router for vLLM and SGLang fleets",
		Long: `kvrouter chooses, for every LLM request, the worker whose KV cache holds the
longest prefix of the prompt, weighed against load, and when another worker's KV
cache runner holds an even longer prefix it attaches a hint telling the chosen
worker which peer to pull those blocks from.

Start with 'kvrouter demo' to see the whole system on one machine.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	for _, c := range commands {
		root.AddCommand(c())
	}
	if len(benchCommands) > 0 {
		bench := &cobra.Command{
			Use:   "bench",
			Short: "Measure kvrouter's components (prints JSON with --json)",
		}
		for _, c := range benchCommands {
			bench.AddCommand(c())
		}
		root.AddCommand(bench)
	}
	return root
}

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "kvrouter:", err)
		os.Exit(1)
	}
}
