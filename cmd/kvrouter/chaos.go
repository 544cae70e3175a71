// This file holds kvrouter chaos: a local cluster under load while faults are injected.
package main

import (
	"encoding/json"
	"errors"

	"github.com/spf13/cobra"

	"kvrouter/internal/chaos"
)

func init() { commands = append(commands, newChaosCmd) }

// errChaosFailed exits 1 after the result was printed.
var errChaosFailed = errors.New("chaos run failed: wrong outputs, inventory divergence or leaks (see the JSON)")

func newChaosCmd() *cobra.Command {
	var (
		o       chaos.Options
		asJSON  bool
		verbose bool
	)
	cmd := &cobra.Command{
		Use:   "chaos --duration D",
		Short: "Run a local cluster under load while injecting faults; check answers and indexes",
		Long: `chaos starts a local deployment, every part a separate process on 127.0.0.1
but NATS: a cluster of three embedded NATS servers in this process (JetStream,
registrations on three replicas), --engines simulated engines ('kvrouter
mocker') each with its state agent, and two router replicas connected to
different NATS servers. --clients clients keep sending completions (streamed
or not) through both routers, on prompts that share documents, while faults
are injected one at a time, at random, for --duration:

  engine_kill          kill -9 an engine, restart it with empty caches
  agent_kill           kill -9 a state agent, restart it
  router_kill          kill -9 a router replica, restart it
  engine_freeze        SIGSTOP an engine, SIGCONT it
  peer_kill_mid_pull   kill -9 the engine a hinted request is pulling from
  nats_server_stop     stop a NATS server, start it again

Every answer is checked against the output computed without an engine (the
simulated model's answer is a function of the prompt alone, whatever cache or
peer its blocks came from). Then the load stops and, within --settle, every
router's index (GET /debug/inventory) must come to hold exactly the blocks
the engines hold (GET /admin/inventory).

It prints one JSON object: requests, client_errors (cause: count),
wrong_outputs, inventory_divergence_blocks, leaked_goroutines and leaked_fds
(of this process, once everything stopped), faults (kind: count), and the
seed, durations and details. The exit status is 1 when wrong_outputs,
inventory_divergence_blocks or a leak is not 0.`,
		Example: `  kvrouter chaos --duration 90s --json
  kvrouter chaos --duration 10m --seed 7 --log-dir ./chaos-logs --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := interruptible(cmd)
			defer stop()
			o.Logger = stderrLogger(cmd, verbosity(verbose))
			res, err := chaos.Run(ctx, o)
			enc := json.NewEncoder(cmd.OutOrStdout())
			if !asJSON {
				enc.SetIndent("", "  ")
			}
			if encErr := enc.Encode(res); encErr != nil && err == nil {
				err = encErr
			}
			if err != nil {
				return err
			}
			if !res.OK() {
				return errChaosFailed
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.Duration, "duration", 0, "how long faults are injected (required)")
	f.Uint64Var(&o.Seed, "seed", 1, "seed of the faults and the prompts: the same seed makes the same choices")
	f.IntVar(&o.Engines, "engines", chaos.DefaultEngines, "simulated engines, each with its state agent")
	f.IntVar(&o.Clients, "clients", chaos.DefaultClients, "concurrent clients")
	f.DurationVar(&o.Settle, "settle", chaos.DefaultSettle, "bound on the wait for every router's index to match the engines after the faults")
	f.BoolVar(&asJSON, "json", false, "print the result on one line")
	f.StringVar(&o.LogDir, "log-dir", "", "keep every process's log in this directory")
	f.BoolVar(&verbose, "verbose", false, "log each fault on stderr")
	_ = cmd.MarkFlagRequired("duration") // only fails for an unknown flag name
	return cmd
}
