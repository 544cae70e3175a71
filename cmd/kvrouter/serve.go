package main

import (
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/spf13/cobra"

	"kvrouter/internal/direct"
	"kvrouter/internal/index"
	"kvrouter/internal/serve"
	"kvrouter/internal/sysmem"
)

// indexBudget resolves --index-memory: positive as given, negative as
// unbounded (0 to the router), 0 derived from the machine's memory and the
// collector's target, once the latter is applied.
func indexBudget(flag int64, log *slog.Logger) int64 {
	switch {
	case flag > 0:
		return flag
	case flag < 0:
		return 0
	}
	avail, err := sysmem.Limit()
	if err != nil {
		log.Warn("index memory unbounded: the machine's memory is unknown; set --index-memory", "err", err)
		return 0
	}
	gc := debug.SetGCPercent(100)
	debug.SetGCPercent(gc)
	budget := index.DefaultMaxBytes(avail, gc)
	log.Info("index memory budget (--index-memory)", "bytes", budget, "machine_bytes", avail, "gc_percent", gc,
		"blocks_one_holder", budget/(index.BytesPerBlock+index.BytesPerPair))
	return budget
}

func init() { commands = append(commands, newServeCmd) }

func newServeCmd() *cobra.Command {
	var gcPercent *int
	o := serve.Defaults()
	var (
		workers     []string
		setupMS     float64
		logLevel    string
		indexMemory int64
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the router service: route OpenAI requests to the worker with the best KV cache overlap",
		Long: `serve runs the router service: an OpenAI-compatible front door (POST
/v1/completions, POST /v1/chat/completions, GET /v1/models) that tokenizes
each request, asks the routing decision core for the (worker, DP rank) whose
caches hold the longest prefix weighed against load, proxies the request
there (streams pass through as they come), and, when another worker's KV
cache runner holds a longer prefix, attaches a kv.fetch hint naming that
peer. Hints never change the chosen worker.

Workers come from two places:
  - state agents registering over NATS (--nats; without it an embedded NATS
    server starts and its URL is logged for agents to join); their events
    arrive through the agents' relays, snapshot first;
  - --worker flags, for simple fleets without agents. The router service then
    reads the engine's KV events itself: it dials an engine that binds
    (events=; DP rank r publishes on the port offset by r), or takes what
    engines send to --events-bind (topic kv@<host>:<port>@<model>, the llm-d
    convention, naming the worker by its url's host:port). A worker whose
    events never arrive is routed in approximate mode: the router service
    assumes the blocks of the requests it sent stay cached for --approx-ttl,
    and never hints from or to such guesses.

--worker takes comma-separated key=value pairs:
  url=http://H:P        the engine's OpenAI server (required)
  events=tcp://H:P      its KV event publisher, dialable; omit for approximate mode
  replay=tcp://H:P      its replay endpoint, to heal sequence gaps (with events=,
                        or an engine with dp=1 that sends to --events-bind)
  block_size=N          KV block size in tokens (default 16; must match the engine)
  dp=N                  data-parallel ranks (default 1)
  tp=N                  tensor-parallel ranks per DP rank (default 1; engine=sglang
                        only): give it when the engine's runners report each TP
                        rank's shard apart (topic <topic>|kvcr-tp<rank>); a block
                        counts as the rank's runner's only while every shard holds it
  type=aggregated|prefill|decode   the worker reads kv.fetch hints as this type
  id=ID                 default: the url's host:port
  model=M               default: what its /v1/models answers (retried until it does)
  engine=vllm|sglang    default vllm; decides where hints and the DP rank go
  hint=vllm|vllm-old|sglang|sglang-old   override the hint placement

Workers that die are marked down: at once when one refuses a connection, or
after --health-down-after failed probes of its GET /health (every
--health-interval; a timeout or a 5xx fails, any other answer passes). A down
worker is chosen for no request and names no hint source; it is probed with
back-off (250ms doubling to 10s) and comes back at its first answer. A request
refused by a worker goes to another; so does, once, one whose connection broke
before any byte of the answer (--retry-reset). A stream that breaks off after
part of it went out ends with an error event, data: {"error": {...}}, and no
[DONE].

Operator views: GET /debug/workers (each worker's health, ranks and caches),
POST /debug/route (the decision for a request body, nothing sent), GET /metrics
(Prometheus), GET /healthz (liveness: 200 while the process serves), GET
/readyz (200 once at least one worker is registered and not down, else 503 with
a JSON reason).
A client may force the worker with the header x-kvrouter-target: <worker id>
when --allow-target-override is set; a forced worker is tried even when down.`,
		Example: `  kvrouter serve --worker url=http://10.0.0.5:8000,events=tcp://10.0.0.5:5557
  kvrouter serve --nats nats://nats:4222 --listen :8080 --hint-policy min-blocks --hint-min-blocks 4
  kvrouter serve --events-bind 'tcp://*:5557' --worker url=http://10.0.0.6:8000 --tokenizer engine`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyGC(*gcPercent); err != nil {
				return err
			}
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			o.Log = stderrLogger(cmd, level)
			for _, w := range workers {
				spec, err := direct.ParseWorkerSpec(w)
				if err != nil {
					return err
				}
				o.Workers = append(o.Workers, spec)
			}
			o.HintSetup = time.Duration(setupMS * float64(time.Millisecond))
			o.MaxIndexBytes = indexBudget(indexMemory, o.Log)
			ctx, stop := interruptible(cmd)
			defer stop()
			return serve.Run(ctx, o)
		},
	}
	f := cmd.Flags()
	gcPercent = gcFlag(f)
	f.StringVar(&o.Listen, "listen", o.Listen, "HOST:PORT of the HTTP front door")
	f.StringVar(&o.NATS, "nats", "", "URL of the NATS cluster (JetStream enabled) where agents register and replicas share load; empty starts an embedded server")
	f.StringVar(&o.NATSListen, "nats-listen", o.NATSListen, "HOST:PORT of the embedded NATS server when --nats is empty (port 0 picks a free one); use a reachable host for agents on other machines")
	f.StringVar(&o.Bucket, "discovery-bucket", o.Bucket, "NATS key-value bucket of worker registrations (the agents' --discovery-bucket)")
	f.DurationVar(&o.Lease, "lease", o.Lease, "registration lease of the discovery bucket; must equal the agents' --lease")
	f.StringArrayVar(&workers, "worker", nil, "an engine to route to without a state agent (repeatable; keys above)")
	f.StringVar(&o.EventsBind, "events-bind", "", "endpoint to bind for engines that connect to the router service with their KV events, e.g. tcp://*:5557")
	f.StringVar(&o.Tokenizer, "tokenizer", o.Tokenizer, "default (the embedded demo tokenizer), engine (ask a worker's POST /tokenize), or the path of a tokenizer.json")
	f.IntVar(&o.TokenizeCache, "tokenize-cache", o.TokenizeCache, "answers kept by --tokenizer engine (LRU)")
	f.StringVar(&o.ChatTemplate, "chat-template", o.ChatTemplate, "chat format: chatml, llama3, plain, or the path of a Go text/template file")
	f.StringVar(&o.TokenizerConfig, "tokenizer-config", "", "tokenizer_config.json whose chat_template picks the chat format (overrides --chat-template)")
	f.Float64Var(&o.Temperature, "temperature", o.Temperature, "0 (the default) takes the cheapest rank, ties to the smaller cache then seeded by the request; T > 0 samples with p ∝ exp(-(cost-min)/((max-min)·T))")
	f.Float64Var(&o.Weights.OverlapCredit, "overlap-credit", o.Weights.OverlapCredit, "cost credit per block cached on the rank's device")
	f.Float64Var(&o.Weights.HostCredit, "host-credit", o.Weights.HostCredit, "cost credit per block restorable from host memory (incl. the rank's own runner)")
	f.Float64Var(&o.Weights.DiskCredit, "disk-credit", o.Weights.DiskCredit, "cost credit per block restorable from disk")
	f.Float64Var(&o.Weights.PrefillLoadScale, "prefill-load-scale", o.Weights.PrefillLoadScale, "weight of prefill work (this request's and queued) against decode blocks")
	f.Float64Var(&o.Weights.RequestWeight, "request-weight", o.Weights.RequestWeight, "cost per request already in flight on the rank (default 0, Dynamo's)")
	f.StringVar(&o.Routing, "routing", "kv", "how the target is chosen: kv (lowest cache-aware cost), or the baselines round-robin, random, least-loaded")
	f.StringVar(&o.HintPolicy, "hint-policy", o.HintPolicy, "when a longer peer prefix is worth a hint: cost (pull time vs recompute time), min-blocks, or off (never hint)")
	f.IntVar(&o.HintMinBlocks, "hint-min-blocks", o.HintMinBlocks, "min-blocks policy: hint when the peer adds at least this many blocks")
	f.Float64Var(&o.HintBandwidthGbps, "hint-bandwidth-gbps", o.HintBandwidthGbps, "cost policy: peer-to-peer transfer rate, Gbit/s")
	f.Float64Var(&setupMS, "hint-setup-ms", float64(o.HintSetup)/float64(time.Millisecond), "cost policy: fixed cost of a pull, milliseconds")
	f.Float64Var(&o.HintPrefillTokensPerS, "hint-prefill-tokens-per-s", o.HintPrefillTokensPerS, "cost policy: the target's prefill rate, tokens/s")
	f.Int64Var(&o.KVBytesPerToken, "kv-bytes-per-token", o.KVBytesPerToken, "cost policy: KV cache bytes per token (Qwen3-32B BF16: 262144)")
	f.DurationVar(&o.ApproxTTL, "approx-ttl", o.ApproxTTL, "approximate mode: how long a routed request's blocks are assumed cached")
	f.DurationVar(&o.DetachedOwnerTTL, "detached-owner-ttl", o.DetachedOwnerTTL, "how long a departed worker's cache owners stay hint sources; 0 drops them at once")
	f.DurationVar(&o.UpstreamIdleTimeout, "upstream-idle-timeout", o.UpstreamIdleTimeout, "reuse a keep-alive connection to an engine only if idle less than this; keep it below the engine's keep-alive (uvicorn: 5s) and any proxy's in front of it (kvrouter_upstream_resends_total rising says it is too long)")
	f.DurationVar(&o.HealthInterval, "health-interval", o.HealthInterval, "probe each worker's GET /health this often; 0 probes only workers marked down by a refused connection")
	f.DurationVar(&o.HealthTimeout, "health-timeout", o.HealthTimeout, "a health probe not answered within this fails")
	f.IntVar(&o.HealthDownAfter, "health-down-after", o.HealthDownAfter, "failed health probes in a row that mark a worker down (a refused connection marks it at once)")
	f.BoolVar(&o.RetryReset, "retry-reset", o.RetryReset, "send a request whose connection to a worker broke before any byte of the answer to another worker, once")
	f.DurationVar(&o.EngineMetricsInterval, "engine-metrics-interval", 0, "poll each worker's /metrics for running/waiting requests and KV usage this often; 0 is off")
	f.BoolVar(&o.AllowTargetOverride, "allow-target-override", false, "let the x-kvrouter-target header force the worker")
	f.IntVar(&o.MaxBlocks, "max-blocks", 0, "cap on indexed blocks per (model, block size), least recently matched evicted first; 0 is no block cap (--index-memory still bounds the index)")
	f.Int64Var(&indexMemory, "index-memory", 0, "cap on each (model, block size) index's estimated memory, in bytes, least recently matched blocks evicted first; "+
		"0 derives it from the machine: half the memory the process may use (the smaller of /proc/meminfo's MemTotal and the cgroup's memory limit) "+
		"divided by the heap growth --gc-percent allows, a tenth of it at the default 400 (a block costs ~105 bytes held by one source, ~45 more per further source); "+
		"negative is unbounded")
	f.StringVar(&o.Replica, "replica", "", "this router service's name among replicas sharing load on NATS; empty picks a random one")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return cmd
}
