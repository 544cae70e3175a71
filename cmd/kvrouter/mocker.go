// This file holds `kvrouter mocker`: a simulated vLLM/SGLang engine with a real KV cache runner.

package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"kvrouter/internal/mocker"
	"kvrouter/internal/runner"
)

// runnerSecret is the runner secret from --runner-secret-file, else the
// environment, else the deprecated --runner-secret; at most one flag.
func runnerSecret(file, arg string) (string, error) {
	if arg != "" {
		if file != "" {
			return "", fmt.Errorf("--runner-secret and --runner-secret-file both given; keep --runner-secret-file")
		}
		return arg, nil
	}
	secret, _, err := runner.SecretFrom(file, os.LookupEnv)
	if err != nil {
		return "", fmt.Errorf("--runner-secret-file or %s: %w", runner.SecretEnv, err)
	}
	return string(secret), nil
}

func init() { commands = append(commands, newMockerCmd) }

func newMockerCmd() *cobra.Command {
	var c mocker.Config
	var flavor, logLevel, secretFile, secretArg string
	var prefillUS, decodeMS, restoreUS, pullSetupMS float64
	cmd := &cobra.Command{
		Use:   "mocker",
		Short: "Run a simulated vLLM/SGLang engine with a real KV cache runner",
		Long: `mocker serves an OpenAI-compatible API (/v1/completions, /v1/chat/completions,
/v1/models, /tokenize, /health, /metrics) like a vLLM or SGLang engine, without a
GPU. KV blocks hold bytes derived from --model-seed and the token prefix; every
computed block is written through to a real KV cache runner (one shard per TP
rank, serving peers on --control-port + attention rank, attention rank =
dp_rank*tp + tp_rank), and a request's kv.fetch hint makes the runner pull blocks
from the named peer over TCP. Output tokens depend on the KV bytes the GPU pool
holds, so a wrong restore would change the answer. Runners prove a shared secret
to each other, read from --runner-secret-file or KVROUTER_RUNNER_SECRET (never
the command line, which every local user can list); runners bound beyond
loopback refuse to start without one unless --runner-insecure is given.

Simulated time: prefill (--prefill-us-per-token), decode steps
(--decode-ms-per-token), restores into the GPU pool (--restore-us-per-token) and
the fixed cost of a peer pull (--pull-setup-ms) are waited out, divided by
--speedup; a pull's blocks really move over TCP, in real time. A pull on a real
fleet pays a fixed cost before its first byte moves: the transfer engine's setup
(memory registration, connection or queue pair), the source scheduling the read
beside its own batch, and control round trips on a real network. Loopback has
next to none of it, so without --pull-setup-ms even a short prefix pulls faster
than it recomputes; with it, a pull wins only beyond a crossover of setup /
(recompute - pull cost per token) tokens, a few thousand on real fleets.

Each DP rank publishes the flavour's KV events on ZMQ (port + dp_rank): GPU
stores and removals, and the runner's inventory (SGLang: medium EXTERNAL;
vLLM: ownership kvcr, medium CPU; with --tp > 1 per TP shard under the topic
"<topic>|kvcr-tp<rank>").

The engine's configuration is served where the state agent reads it: SGLang
GET /get_server_info, vLLM GET /kvrouter/engine_args. POST /admin/evict
{"tier":"gpu|runner|all","prompt":"..."|"tokens":[...],"dp_rank":N} evicts
blocks (all of them without prompt or tokens); POST /admin/reset clears every
cache. A request's rank is the one a router names (the X-Kvrouter-Dp-Rank
header, or vLLM's X-Data-Parallel-Rank), else the body's (SGLang's
"data_parallel_rank", or "dp_rank"), else the least loaded.

With --role prefill or decode the engine serves one leg of disaggregated
requests, as the flavour's engine does: vLLM's prefill leg carries
kv_transfer_params {"do_remote_decode": true} and is answered with
kv_transfer_params naming the prefill's runner and blocks, which the decode
leg carries back; SGLang's legs both carry bootstrap_host, bootstrap_port and
bootstrap_room, and the decode engine asks the prefill's bootstrap server
(--bootstrap-port) where the room's blocks are. Either way the decode engine
pulls them over the runner transport and answers as one engine would have.`,
		Example: `  kvrouter mocker --flavor sglang --block-size 64
  kvrouter mocker --flavor vllm --listen 127.0.0.1:8001 --control-port 26000 \
      --kv-events-endpoint 'tcp://*:5567' --kv-events-replay-endpoint 'tcp://*:5667'
  kvrouter mocker --dp 2 --tp 2 --speedup 10
  kvrouter mocker --flavor sglang --role prefill --bootstrap-port 8998`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			c.Logger = stderrLogger(cmd, level)
			c.Flavor = mocker.Flavor(flavor)
			c.PrefillPerToken = time.Duration(prefillUS * float64(time.Microsecond))
			c.DecodePerToken = time.Duration(decodeMS * float64(time.Millisecond))
			c.RestorePerToken = time.Duration(restoreUS * float64(time.Microsecond))
			c.PullSetup = time.Duration(pullSetupMS * float64(time.Millisecond))
			secret, err := runnerSecret(secretFile, secretArg)
			if err != nil {
				return err
			}
			c.RunnerSecret = secret
			e, err := mocker.Start(c)
			if err != nil {
				return err
			}
			defer e.Close()
			sig := make(chan os.Signal, 1)
			signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
			defer signal.Stop(sig)
			select {
			case <-sig:
			case <-cmd.Context().Done():
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&c.Listen, "listen", mocker.DefaultListen, "HTTP listen address (port 0 picks a free one)")
	f.StringVar(&c.Model, "model", mocker.DefaultModel, "model name served and reported (the embedded kvrouter-demo tokenizer is used whatever the name)")
	f.StringVar(&flavor, "flavor", string(mocker.SGLang), "engine imitated: sglang (page hash chain, kv_hints, EXTERNAL runner inventory, /get_server_info) or vllm (sha256_cbor, kv_transfer_params.kv_hint, ownership kvcr, /kvrouter/engine_args)")
	f.StringVar(&c.EventFormat, "event-format", mocker.FormatMap, "KV event encoding: map (named fields) or array (positional, older engines; sglang only, as vLLM's array form cannot mark runner-owned blocks)")
	f.IntVar(&c.BlockSize, "block-size", mocker.DefaultBlockSize, "tokens per KV block (SGLang page_size, vLLM block_size); vLLM's default is 16, SGLang deployments with KVCR typically use 64")
	f.IntVar(&c.DP, "dp", 1, "data-parallel ranks, each with its own GPU pool, runner and event stream")
	f.IntVar(&c.TP, "tp", 1, "tensor-parallel ranks per DP rank: one runner shard each, holding 1/tp of every block")
	f.IntVar(&c.GPUBlocks, "gpu-blocks", mocker.DefaultGPUBlocks, "GPU KV blocks per DP rank")
	f.IntVar(&c.RunnerBlocks, "runner-blocks", mocker.DefaultRunnerBlocks, "block slots of each runner shard (host DRAM tier)")
	f.IntVar(&c.KVBytesPerToken, "kv-bytes-per-token", mocker.DefaultKVBytesPerToken, "bytes of simulated KV per token (a real model has ~100 KiB+); block bytes = this × block size, split across TP shards")
	f.IntVar(&c.MaxNumSeqs, "max-num-seqs", mocker.DefaultMaxNumSeqs, "most requests in the running batch per DP rank")
	f.IntVar(&c.MaxBatchedTokens, "max-batched-tokens", mocker.DefaultMaxBatchedTokens, "token budget of one step (decode tokens + prefill chunk); longer prompts prefill in chunks")
	f.IntVar(&c.MaxModelLen, "max-model-len", mocker.DefaultMaxModelLen, "most prompt + output tokens of a request")
	f.IntVar(&c.ControlPort, "control-port", mocker.DefaultControlPort, "base port of the runners' peer control endpoints: DP rank d, TP rank t binds this + d*tp + t")
	f.StringVar(&c.ControlHost, "control-host", "", "bind host of the runners; empty binds the advertise host when it is loopback, else every interface")
	f.StringVar(&c.AdvertiseHost, "advertise-host", mocker.DefaultAdvertiseHost, "host peers and subscribers dial (runner control endpoints, events bound to a wildcard)")
	f.StringVar(&secretFile, "runner-secret-file", "", "file holding the shared secret runners prove to each other before pulling blocks (HMAC handshake; surrounding whitespace ignored); else the "+runner.SecretEnv+" environment variable; required when the runners bind beyond loopback")
	f.StringVar(&secretArg, "runner-secret", "", "the shared secret itself")
	_ = f.MarkDeprecated("runner-secret", "the process list shows it to every local user; use --runner-secret-file or "+runner.SecretEnv)
	f.BoolVar(&c.RunnerInsecure, "runner-insecure", false, "let runners bound beyond loopback serve blocks without a shared secret, to anyone who reaches their ports")
	f.Uint64Var(&c.ModelSeed, "model-seed", 0, "seed of the simulated weights: instances with different seeds hold different KV bytes for the same prompt")
	f.StringVar(&c.HashSeed, "hash-seed", "", "vLLM PYTHONHASHSEED for sha256_cbor block hashes; empty uses vLLM's default \"vllm-none-hash\" (sglang ignores it)")
	f.Float64Var(&prefillUS, "prefill-us-per-token", float64(mocker.DefaultPrefillPerToken/time.Microsecond), "simulated prefill cost per prompt token computed, in microseconds")
	f.Float64Var(&decodeMS, "decode-ms-per-token", float64(mocker.DefaultDecodePerToken/time.Millisecond), "simulated cost of one engine step (the inter-token latency), in milliseconds")
	f.Float64Var(&restoreUS, "restore-us-per-token", float64(mocker.DefaultRestorePerToken/time.Microsecond), "simulated cost per token of copying a block from the runner into the GPU pool, in microseconds")
	f.Float64Var(&pullSetupMS, "pull-setup-ms", 0, "simulated fixed cost of each peer pull, in milliseconds, paid before its blocks move (transfer-engine setup, remote scheduling, control round trip); 0 adds none")
	f.Float64Var(&c.Speedup, "speedup", 1, "simulated time runs this many times faster than wall time (a peer pull's transfer always takes its real time)")
	f.StringVar(&c.EventsEndpoint, "kv-events-endpoint", mocker.DefaultEventsEndpoint, "ZMQ PUB endpoint of DP rank 0 (rank r: port + r); binds when it holds a wildcard")
	f.StringVar(&c.ReplayEndpoint, "kv-events-replay-endpoint", mocker.DefaultReplayEndpoint, "ZMQ ROUTER replay endpoint of DP rank 0 (rank r: port + r); \"none\" disables replay")
	f.StringVar(&c.SnapshotEndpoint, "kv-events-snapshot-endpoint", "", "SGLang flavour: ZMQ ROUTER serving snapshot-v1 cuts, DP rank 0's (rank r: port + r); live topics then name each rank's publisher epoch; empty serves none")
	f.StringVar(&c.Topic, "kv-events-topic", "", "topic frame of every event message; empty, or kv@<advertise-host>:<http-port>@<model> with --kv-events-connect")
	f.StringVar(&c.EventsConnect, "kv-events-connect", "", "dial this binding subscriber (llm-d style) instead of binding --kv-events-endpoint")
	f.StringArrayVar(&c.LoRAs, "lora", nil, "a LoRA adapter served besides the model, by the name requests give it (repeatable): vLLM requests name it as their model, SGLang ones in lora_path or as model \"MODEL:ADAPTER\"; its blocks are cached and hashed apart, as the engines do")
	f.StringVar(&c.Tokenizer, "tokenizer", "", "the model's tokenizer.json or model directory (tokenizer_config.json, chat template), as the engine loads them; empty: the embedded demo tokenizer, whose chat format is "+mocker.DefaultChatTemplate)
	f.StringVar(&c.ChatTemplate, "chat-template", "", "override the model's chat template: chatml, qwen2, qwen2.5, qwen3, llama3, plain, or a Jinja file")
	f.StringVar(&c.Role, "role", mocker.RoleAggregated, "part in disaggregated serving: aggregated, prefill (computes a request's KV and keeps it for the decode engine to pull) or decode (pulls it from the prefill engine's runner and generates); advertised as SGLang's disaggregation_mode or vLLM's worker_type and kv_role")
	f.IntVar(&c.BootstrapPort, "bootstrap-port", 0, "SGLang prefill engine: port of its bootstrap server, which tells decode engines where a request's KV is (SGLang's disaggregation_bootstrap_port; 0: 8998)")
	f.DurationVar(&c.KVTransferTimeout, "kv-transfer-timeout", mocker.DefaultKVTransferTimeout, "disaggregated serving: how long a prefill engine keeps a request's blocks for its decode engine, and how long a decode engine waits for them (wall time)")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return cmd
}
