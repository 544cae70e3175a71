// This file holds `kvrouter serve`: the router service's flags, turned into serve.Options.

package main

import (
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
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
	var natsAuth *natsAuthFlags // set with the flags, read once they are parsed
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
    server starts and its URL is logged for agents to join; one listening
    beyond loopback (--nats-listen) requires a token, generated at start
    unless given and written to --nats-token-file, default
    ~/.config/kvrouter/nats-token, for agents' --nats-token-file); their
    events arrive through the agents' relays, snapshot first;
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
  replay=tcp://H:P      its replay endpoint, to heal sequence gaps and catch up on
                        its history at start (with events=, or an engine with dp=1
                        that sends to --events-bind: at its first batch) and, with
                        events=, on what it sent while the connection was down
  snapshot=tcp://H:P    SGLang's snapshot_endpoint (engine=sglang, with events=): its
                        snapshot-v1 cut is the start of the catch-up, at start and
                        again from seq 0 whenever the engine comes back
  block_size=N          KV block size in tokens (default 16; must match the engine)
  dp=N                  data-parallel ranks (default 1)
  tp=N                  tensor-parallel ranks per DP rank (default 1; engine=sglang
                        only): give it when the engine's runners report each TP
                        rank's shard apart (topic <topic>|kvcr-tp<rank>); a block
                        counts as the rank's runner's only while every shard holds it
  type=aggregated|prefill|decode   the worker's role (and its type for kv.fetch
                        hints): prefill and decode workers serve one leg each of
                        disaggregated requests
  bootstrap_port=N      an SGLang prefill worker's disaggregation_bootstrap_port
                        (default 8998)
  id=ID                 default: the url's host:port
  model=M               default: what its /v1/models answers (retried until it does)
  engine=vllm|sglang    default vllm; decides where hints and the DP rank go
  hint=vllm|vllm-old|sglang|sglang-old   override the hint placement
  control=tcp://H:P[;tcp://H:P...]   its runners' control endpoints, one per DP
                        rank (or rank 0's alone: rank d's at port + d*tp): with
                        type=, the worker is a hint source, peers pulling from there;
                        each runner (TP rank t's at port + t) is asked for its epoch
                        every --runner-probe, and its inventory is dropped when it
                        restarts or stays silent for --owner-ttl

A model with prefill and decode workers (type=, or the role a state agent
read from SGLang's disaggregation_mode, vLLM's kv_role or Dynamo's
worker_type) is served disaggregated, in each engine's protocol: vLLM's
prefill leg (kv_transfer_params do_remote_decode, max_tokens 1) then the
decode leg with the prefill's answer; SGLang's two legs at once with
bootstrap_host, bootstrap_port and bootstrap_room. The decode worker is chosen
by its decode load and what it holds of the prompt, the prefill worker by the
usual cost, and the hint goes to the prefill leg. A vLLM decode worker that
would compute fewer than --pd-local-prefill-tokens prompt tokens itself (or
holds --pd-local-prefill-fraction of the prompt) runs the request alone. A
failed prefill leg is tried on another prefill worker, then the request runs
whole on the decode worker (vLLM) or an aggregated worker (SGLang). Clients'
kv_transfer_params and bootstrap fields are dropped: the router owns
disaggregation.

Block identities come from token ids, so the router must tokenize exactly as
the engines do. By default (--tokenizer engine) it asks a worker's POST
/tokenize (answers cached, --tokenize-cache); SGLang's takes no chat messages,
so chats bound for SGLang workers are then routed on load alone. With
--tokenizer PATH (a tokenizer.json or a model directory) it tokenizes in
process and renders chats with the model's own Jinja template, exactly as
'kvrouter tokenize' shows. --tokenizer demo is the simulated fleet's
(kvrouter mocker, kvrouter demo). Each model's tokenization is checked against
one of its engines' /tokenize at start and every --tokenizer-check-interval:
a mismatch is logged with its first differing position and sets
kvrouter_tokenizer_mismatch{model}.

Workers that die are marked down: at once when one refuses a connection, or
after --health-down-after failed probes of its GET /health (every
--health-interval; a timeout or a 5xx fails, any other answer passes). A down
worker is chosen for no request and names no hint source; it is probed with
back-off (250ms doubling to 10s) and comes back at its first answer. A request
refused by a worker goes to another; so does, once, one whose connection broke
before any byte of the answer (--retry-reset). A stream that breaks off after
part of it went out ends with an error event, data: {"error": {...}}, and no
[DONE].

The front door bounds what strangers can make it hold: a request body (at
most 32 MiB) must arrive within --body-timeout (else 408), its buffer grows
as its bytes arrive, and the bodies held at once stay within
--max-body-memory (past it a 503 with Retry-After). A prompt longer than its
model's context, the largest max_model_len its workers report (GET
/v1/models; SGLang's context_length on GET /get_server_info; no bound while
one of them reports none), is refused with a 400 naming max_model_len, before
it is tokenized when its size alone tells.
A non-streamed answer over 64 MiB is a 502, and a stream whose event exceeds
16 MiB ends with an error event; neither is passed on cut.

Operator views, on --admin-listen (loopback by default, apart from the OpenAI
port: they tell whose prefixes are cached and where the runners listen): GET
/debug/workers (each worker's health, ranks and caches), POST /debug/route (the
decision for a request body, nothing sent), GET /metrics (Prometheus). On the
OpenAI port: GET /healthz (liveness: 200 while the process serves), GET /readyz
(200 once at least one worker is registered and not down, else 503 with a JSON
reason).
A client may force the worker with the header x-kvrouter-target: <worker id>
when --allow-target-override is set; a forced worker is tried even when down.`,
		Example: `  kvrouter serve --worker url=http://10.0.0.5:8000,events=tcp://10.0.0.5:5557
  kvrouter serve --nats nats://nats:4222 --listen :8080 --hint-policy min-blocks --hint-min-blocks 4
  kvrouter serve --worker url=http://10.0.0.6:8000,events=tcp://10.0.0.6:5557 --tokenizer ./Qwen3-8B`,
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
			// The cost policy's figures are learned; a flag given fixes one.
			for _, name := range []string{"hint-bandwidth-gbps", "hint-prefill-tokens-per-s", "kv-bytes-per-token", "hint-setup-ms"} {
				if !cmd.Flags().Changed(name) {
					continue
				}
				if v := cmd.Flags().Lookup(name).Value.String(); name != "hint-setup-ms" && (v == "0" || strings.HasPrefix(v, "-")) ||
					name == "hint-setup-ms" && strings.HasPrefix(v, "-") {
					return fmt.Errorf("--%s %s: give a positive figure to fix it, or leave the flag out to learn it", name, v)
				}
			}
			if cmd.Flags().Changed("hint-setup-ms") {
				o.HintSetup = time.Duration(setupMS * float64(time.Millisecond))
				if o.HintSetup == 0 {
					o.HintSetup = -1 // a fixed zero setup
				}
			}
			o.MaxIndexBytes = indexBudget(indexMemory, o.Log)
			var err error
			if o.NATSAuth, err = natsAuth.resolve(o.NATS == ""); err != nil {
				return err
			}
			ctx, stop := interruptible(cmd)
			defer stop()
			return serve.Run(ctx, o)
		},
	}
	f := cmd.Flags()
	gcPercent = gcFlag(f)
	f.StringVar(&o.Listen, "listen", o.Listen, "HOST:PORT of the HTTP front door")
	f.StringVar(&o.AdminListen, "admin-listen", o.AdminListen, "HOST:PORT of the operator views (/metrics, /debug/*); keep it off networks clients reach (port 0 picks a free one, logged); empty serves none")
	f.StringVar(&o.NATS, "nats", "", "URL of the NATS cluster (JetStream enabled) where agents register and replicas share load; empty starts an embedded server")
	natsAuth = addNATSAuthFlags(f)
	f.StringVar(&o.NATSListen, "nats-listen", o.NATSListen, "HOST:PORT of the embedded NATS server when --nats is empty (port 0 picks a free one); use a reachable host for agents on other machines")
	f.StringVar(&o.Bucket, "discovery-bucket", o.Bucket, "NATS key-value bucket of worker registrations (the agents' --discovery-bucket)")
	f.DurationVar(&o.Lease, "lease", o.Lease, "registration lease of the discovery bucket; must equal the agents' --lease")
	f.StringArrayVar(&workers, "worker", nil, "an engine to route to without a state agent (repeatable; keys above)")
	f.StringSliceVar(&o.PeerAllow, "peer-allow", nil, "networks (CIDRs or addresses, comma-separated or repeated) whose runner endpoints any agent's registration may name in hints; "+
		"by default only endpoints on the registering worker's own host (as its URL names it) are, and a registration naming another is routed without hints (kvrouter_peer_endpoints_refused_total)")
	f.StringVar(&o.EventsBind, "events-bind", "", "endpoint to bind for engines that connect to the router service with their KV events, e.g. tcp://*:5557")
	f.StringVar(&o.Tokenizer, "tokenizer", o.Tokenizer, "engine (ask a worker's POST /tokenize, as vLLM and SGLang serve it; SGLang's renders no chats), a tokenizer.json or model directory (its tokenizer_config.json and chat template, as the engines load them), or demo (the simulated fleet's embedded tokenizer)")
	f.IntVar(&o.TokenizeCache, "tokenize-cache", o.TokenizeCache, "answers kept by --tokenizer engine (LRU)")
	f.StringVar(&o.ChatTemplate, "chat-template", "", "with a local --tokenizer: a Jinja chat template file overriding the model's, as the engines' --chat-template, or a built-in format (chatml, qwen2, qwen2.5, qwen3, llama3, plain)")
	f.StringVar(&o.TokenizerConfig, "tokenizer-config", "", "with --tokenizer PATH: the tokenizer_config.json to use (default: the one beside tokenizer.json in a model directory)")
	f.DurationVar(&o.TokenizerCheck, "tokenizer-check-interval", o.TokenizerCheck, "check each model's tokenization against one of its engines' POST /tokenize at start and this often (kvrouter_tokenizer_mismatch, /debug/workers); 0 never")
	f.Float64Var(&o.Temperature, "temperature", o.Temperature, "0 (the default) takes the cheapest rank, ties to the smaller cache then seeded by the request; T > 0 samples with p ∝ exp(-(cost-min)/((max-min)·T))")
	f.Float64Var(&o.Weights.OverlapCredit, "overlap-credit", o.Weights.OverlapCredit, "cost credit per block cached on the rank's device")
	f.Float64Var(&o.Weights.HostCredit, "host-credit", o.Weights.HostCredit, "cost credit per block restorable from host memory (incl. the rank's own runner)")
	f.Float64Var(&o.Weights.DiskCredit, "disk-credit", o.Weights.DiskCredit, "cost credit per block restorable from disk")
	f.Float64Var(&o.Weights.PrefillLoadScale, "prefill-load-scale", o.Weights.PrefillLoadScale, "weight of prefill work (this request's and queued) against decode blocks")
	f.Float64Var(&o.Weights.RequestWeight, "request-weight", o.Weights.RequestWeight, "cost per request already in flight on the rank (default 0, Dynamo's)")
	f.StringVar(&o.Routing, "routing", "kv", "how the target is chosen: kv (lowest cache-aware cost), or the baselines round-robin, random, least-loaded")
	f.StringVar(&o.HintPolicy, "hint-policy", o.HintPolicy, "when a longer peer prefix is worth a hint: cost (predicted pull time vs recompute time, learned from what engines report), min-blocks, or off (never hint)")
	f.IntVar(&o.HintMinBlocks, "hint-min-blocks", o.HintMinBlocks, "min-blocks policy: hint when the peer adds at least this many blocks")
	f.Float64Var(&o.HintMargin, "hint-margin", o.HintMargin, "cost policy: hint when the predicted pull costs at most (1 - margin) of the predicted recompute")
	f.Float64Var(&o.HintBandwidthGbps, "hint-bandwidth-gbps", 0, "cost policy: fix the peer-to-peer transfer rate, Gbit/s, instead of learning it (prior: 100)")
	f.Float64Var(&setupMS, "hint-setup-ms", 0, "cost policy: fix the pull's setup cost, milliseconds, instead of learning it (prior: 2)")
	f.Float64Var(&o.HintPrefillTokensPerS, "hint-prefill-tokens-per-s", 0, "cost policy: fix the targets' recompute rate, tokens/s, instead of learning it (prior: 20000)")
	f.Int64Var(&o.KVBytesPerToken, "kv-bytes-per-token", 0, "cost policy: fix the KV cache bytes per token instead of taking the engines' reports (prior: 262144, Qwen3-32B BF16)")
	f.DurationVar(&o.ApproxTTL, "approx-ttl", o.ApproxTTL, "approximate mode: how long a routed request's blocks are assumed cached")
	f.DurationVar(&o.DetachedOwnerTTL, "detached-owner-ttl", o.DetachedOwnerTTL, "how long a departed worker's cache owners stay hint sources; 0 drops them at once")
	f.DurationVar(&o.RunnerProbe, "runner-probe", o.RunnerProbe, "how often the KV cache runner of each --worker given control= is asked for its start epoch: the runner's inventory outlives its engine while it answers with the epoch it had; 0 disables the probe (that inventory is reset with its engine)")
	f.DurationVar(&o.OwnerTTL, "owner-ttl", o.OwnerTTL, "how long a --worker runner's inventory is kept while the runner does not answer --runner-probe (not a hint source meanwhile)")
	f.DurationVar(&o.UpstreamIdleTimeout, "upstream-idle-timeout", o.UpstreamIdleTimeout, "reuse a keep-alive connection to an engine only if idle less than this; keep it below the engine's keep-alive (uvicorn: 5s) and any proxy's in front of it (kvrouter_upstream_resends_total rising says it is too long)")
	f.DurationVar(&o.HealthInterval, "health-interval", o.HealthInterval, "probe each worker's GET /health this often; 0 probes only workers marked down by a refused connection")
	f.DurationVar(&o.HealthTimeout, "health-timeout", o.HealthTimeout, "a health probe not answered within this fails")
	f.IntVar(&o.HealthDownAfter, "health-down-after", o.HealthDownAfter, "failed health probes in a row that mark a worker down (a refused connection marks it at once)")
	f.BoolVar(&o.RetryReset, "retry-reset", o.RetryReset, "send a request whose connection to a worker broke before any byte of the answer to another worker, once")
	f.IntVar(&o.PD.LocalPrefillTokens, "pd-local-prefill-tokens", o.PD.LocalPrefillTokens, "disaggregated serving: skip the prefill leg when the (vLLM) decode worker would compute fewer prompt tokens than this itself (the default is measured in docs/benchmarks.md); 0 never skips on this ground")
	f.Float64Var(&o.PD.LocalPrefillFraction, "pd-local-prefill-fraction", o.PD.LocalPrefillFraction, "disaggregated serving: skip the prefill leg when the (vLLM) decode worker holds at least this fraction of the prompt; 0 never skips on this ground")
	f.Float64Var(&o.PD.DecodePrefillScale, "pd-decode-prefill-scale", o.PD.DecodePrefillScale, "disaggregated serving: weight of the prompt blocks a decode worker lacks (it pulls them) against its decode load, as a fraction of --prefill-load-scale")
	f.DurationVar(&o.BodyTimeout, "body-timeout", o.BodyTimeout, "a client must send its whole request body within this once the head is read, else 408")
	f.Int64Var(&o.MaxBodyMemory, "max-body-memory", o.MaxBodyMemory, "bytes of request bodies held at once (buffers grow as bytes arrive); a body past it gets a 503 with Retry-After (kvrouter_requests_refused_total{reason=\"body_busy\"})")
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
