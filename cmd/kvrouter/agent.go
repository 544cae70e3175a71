// This file holds `kvrouter agent`: the state agent's flags and its run beside one engine worker.

package main

import (
	"github.com/spf13/cobra"

	"kvrouter/internal/agent"
	"kvrouter/internal/discovery"
	"kvrouter/internal/workerconfig"
)

func init() { commands = append(commands, newAgentCmd) }

func newAgentCmd() *cobra.Command {
	var cfg agent.Config
	var engine string
	var natsAuth *natsAuthFlags // set with the flags, read once they are parsed
	cmd := &cobra.Command{
		Use:   "agent --engine sglang|vllm --engine-url http://HOST:PORT --nats URL",
		Short: "Run the state agent beside one engine worker: register it and relay its KV inventory",
		Long: `agent runs beside one inference engine worker. It reads the engine's
configuration (SGLang: GET /get_server_info; vLLM: --config FILE, or GET
/kvrouter/engine_args on kvrouter's simulated engines), retrying while the
engine starts, and validates it the way 'kvrouter validate' does: a
configuration that cannot run as written exits 1 naming the option to fix.

It registers the worker in discovery (NATS key-value, kept alive by a lease
refreshed every --lease/3): model, URL, block size, DP ranks, and for a
hint-capable worker its runners' control endpoints, worker type and the
capability flag, published in that order. A topology hints cannot use yet
(pipeline or context parallel, multi-node) registers as a plain routing
target without those keys, and its worker-owned inventory is still relayed.

It subscribes to the KV events of every DP rank, splits worker-owned blocks
(one source per DP rank) from runner-owned ones (one source per cache owner;
with TP > 1 a block counts only while every TP rank's runner holds it), keeps
a local index, and republishes every change on the event plane with its own
gap-free cursor, answering snapshot requests so router services can join late.
At start it catches up on the engine's history at once: the snapshot-v1 cut
where SGLang offers one (snapshot_endpoint), and the replay buffer from seq 0;
such an engine is caught up on that way again whenever it comes back (a
reconnect or a restart), any other at a reconnect on what it sent meanwhile.
Engine gaps are healed by replay; while one is open, or after an engine
restart or lost events, the rank's sources are reset and not ready until the
stream is in order again. A cache owner's inventory belongs to its runners:
it outlives an engine restart while every runner answers --runner-probe with
the epoch it had, and is dropped when a runner restarts or stays silent for
--owner-ttl. On SIGINT/SIGTERM the worker ranks (and owners whose runners the
agent cannot vouch for) are announced gone, then the worker is deregistered.`,
		Example: `  kvrouter agent --engine sglang --engine-url http://10.0.0.7:30000 --nats nats://nats:4222
  kvrouter agent --engine vllm --engine-url http://10.0.0.8:8000 --config engine_args.json --nats nats://nats:4222 --dp-start 4
  kvrouter agent --engine sglang --engine-url http://127.0.0.1:30000 --single-host --embedded-nats --metrics-listen 127.0.0.1:9400`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Engine = workerconfig.Engine(engine)
			var err error
			if cfg.NATSAuth, err = natsAuth.resolve(cfg.EmbeddedNATS); err != nil {
				return err
			}
			a, err := agent.New(cfg)
			if err != nil {
				return err
			}
			ctx, stop := interruptible(cmd)
			defer stop()
			return a.Run(ctx)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&engine, "engine", "", "inference engine of the worker: sglang or vllm (required)")
	fl.StringVar(&cfg.EngineURL, "engine-url", "", "the engine's HTTP server, http://HOST:PORT (required): registered as the worker's URL, and where the configuration and /health are read")
	fl.StringVar(&cfg.ConfigFile, "config", "", "read the engine configuration from this JSON file instead of --engine-url (vLLM serves none itself)")
	fl.DurationVar(&cfg.EngineWait, "engine-wait", agent.DefaultEngineWait, "how long to wait for the engine to serve its configuration while it starts; 0 waits forever")
	fl.DurationVar(&cfg.EngineGrace, "engine-grace", agent.DefaultEngineGrace, "how long the engine's /health may fail before its inventory is withdrawn (sources reset, not ready); 0 disables the probe")
	fl.DurationVar(&cfg.RunnerProbe, "runner-probe", agent.DefaultRunnerProbe, "how often each KV cache runner's control endpoint is asked for its start epoch: a cache owner's inventory outlives its engine while its runners answer with the epoch they had; 0 disables the probe (owners are reset with their engine)")
	fl.DurationVar(&cfg.OwnerTTL, "owner-ttl", agent.DefaultOwnerTTL, "how long a cache owner's inventory is kept while its runner does not answer (not a hint source meanwhile)")
	fl.StringVar(&cfg.WorkerID, "worker-id", "", "worker id in discovery, stable across restarts; default the --engine-url host:port")
	fl.StringVar(&cfg.AdvertiseHost, "advertise-host", "", "host to dial for KV event endpoints bound to a wildcard such as tcp://*:5557; empty uses the runner's advertised host, else the engine's host argument, else 127.0.0.1")
	fl.BoolVar(&cfg.SingleHost, "single-host", false, "every peer runs on this machine (local demo cluster): accept a loopback advertise host, which is refused otherwise")
	fl.IntVar(&cfg.DPStart, "dp-start", -1, "first global DP rank this worker serves; -1 takes it from the configuration (vLLM data_parallel_rank or data_parallel_start_rank, SGLang 0)")
	fl.StringVar(&cfg.NATSURL, "nats", "", "NATS URL of the cluster, e.g. nats://nats:4222 (required unless --embedded-nats)")
	natsAuth = addNATSAuthFlags(fl)
	fl.BoolVar(&cfg.EmbeddedNATS, "embedded-nats", false, "run a private embedded NATS server instead of --nats (tests; nobody else sees the worker)")
	fl.DurationVar(&cfg.NATSTimeout, "nats-timeout", agent.DefaultNATSTimeout, "how long to keep retrying an unreachable --nats at start before exiting")
	fl.DurationVar(&cfg.Lease, "lease", agent.DefaultLease, "registration lease: router services drop the worker if the agent stops refreshing it (every lease/3); at least 1s")
	fl.StringVar(&cfg.Bucket, "discovery-bucket", discovery.DefaultBucket, "NATS key-value bucket of worker registrations (the router services' --discovery-bucket)")
	fl.StringVar(&cfg.MetricsListen, "metrics-listen", "", "address to serve Prometheus /metrics and /healthz on, e.g. :9400; empty serves none")
	_ = cmd.MarkFlagRequired("engine") // only fails for an unknown flag name
	_ = cmd.MarkFlagRequired("engine-url")
	return cmd
}
