// This file holds `kvrouter validate`: an engine configuration checked, its descriptor printed.

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"

	"github.com/spf13/cobra"

	"kvrouter/internal/workerconfig"
)

func init() { commands = append(commands, newValidateCmd) }

func newValidateCmd() *cobra.Command { return validateCmd(os.ReadFile, net.LookupHost) }

type validateFlags struct {
	engine        string
	config        string
	dpStart       int
	advertiseHost string
	singleHost    bool
}

// validateCmd takes the file reader and resolver so tests can pin them.
func validateCmd(readFile func(string) ([]byte, error), resolve workerconfig.Resolver) *cobra.Command {
	var f validateFlags
	cmd := &cobra.Command{
		Use:   "validate --engine sglang|vllm --config FILE",
		Short: "Check a worker's engine configuration and print its state-agent descriptor",
		Long: `validate reads an inference engine's configuration the way the state agent
does and prints the worker's descriptor as JSON: worker type, KV cache runner
mode, KV block size, DP ranks, the KV event endpoints to subscribe to (bind
addresses made dialable), the registration runtime data of a hint-capable
worker (router_hint_source_control_endpoints keyed by global DP rank, then
router_hint_worker_type, then router_hint, in publication order), the runner
control endpoints of every TP rank, and the cache owner ids.

--config is a JSON file:
  sglang  the server arguments, e.g. the object GET /get_server_info returns
          (unknown fields are ignored; hicache_storage_backend_extra_config may
          be a mapping, JSON text or @path, read relative to this directory)
  vllm    the engine arguments (kv_transfer_config and kv_events_config as
          objects or JSON text); Dynamo's role goes in worker_type
          ("agg", "prefill" or "decode"; default agg)

Exit status: 0 when the configuration is valid. That includes a topology that
cannot take part in KV hints yet (pipeline or context parallel, multi-node):
the descriptor is printed with "hint_capable": false and the reason in
"refusal", because such a worker still serves as a plain routing target.
A configuration that cannot run as written (malformed JSON, a bad port, a
loopback or unspecified advertise host, a HiCache-only option in linker mode,
a missing publish_inventory, ...) prints the error, naming the option to fix,
on stderr and exits 1.`,
		Example: `  kvrouter validate --engine sglang --config server_info.json
  curl -s http://worker:30000/get_server_info > si.json && kvrouter validate --engine sglang --config si.json
  kvrouter validate --engine vllm --config engine_args.json --dp-start 4 --advertise-host 10.0.0.7`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runValidate(cmd.OutOrStdout(), f, readFile, resolve)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.engine, "engine", "", "engine that reads the configuration: sglang or vllm (required)")
	fl.StringVar(&f.config, "config", "", "path of the configuration JSON file (required)")
	fl.IntVar(&f.dpStart, "dp-start", -1, "first global DP rank this worker serves; -1 takes it from the configuration (vLLM data_parallel_rank or data_parallel_start_rank, SGLang 0)")
	fl.StringVar(&f.advertiseHost, "advertise-host", "", "host subscribers dial for KV event endpoints bound to a wildcard such as tcp://*:5557; empty uses the runner's advertised host, else the engine's host argument, else 127.0.0.1")
	fl.BoolVar(&f.singleHost, "single-host", false, "every worker of the deployment runs on this one machine, so loopback advertise hosts are dialable by all peers (as kvrouter agent --single-host)")
	_ = cmd.MarkFlagRequired("engine") // only fails for an unknown flag name
	_ = cmd.MarkFlagRequired("config")
	return cmd
}

func runValidate(w io.Writer, f validateFlags, readFile func(string) ([]byte, error), resolve workerconfig.Resolver) error {
	engine, err := workerconfig.ParseEngine(f.engine)
	if err != nil {
		return fmt.Errorf("--engine: %w", err)
	}
	data, err := readFile(f.config)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	opt := workerconfig.Options{AdvertiseHost: f.advertiseHost, ReadFile: readFile, Resolve: resolve, AllowLoopback: f.singleHost}
	if f.dpStart >= 0 {
		opt.DPStart = &f.dpStart
	}
	d, err := workerconfig.Build(engine, data, opt)
	if err != nil {
		return fmt.Errorf("%s: %w", f.config, err)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(d)
}
