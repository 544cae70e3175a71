// This file holds the engine's Config: flavour, event format, defaults and their validation.

package mocker

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"kvrouter/internal/kvencode"
	"kvrouter/internal/kvhash"
	"kvrouter/internal/runner"
	"kvrouter/internal/tokenizer"
)

// ErrConfig is wrapped by every configuration error; the message names the
// flag to fix.
var ErrConfig = errors.New("mocker: bad config")

// Flavor is the engine the mocker imitates: it decides the event wire form,
// the engine block hash, the mediums of runner-owned inventory and where a
// request carries its hint.
type Flavor string

// Flavours.
const (
	SGLang Flavor = "sglang"
	VLLM   Flavor = "vllm"
)

// Event formats (--event-format).
const (
	FormatMap   = "map"
	FormatArray = "array"
)

// Defaults. A 2,000-token prompt prefills in 10 ms + 2,000 × 75 µs = 160 ms
// simulated, the order of a mid-size model on one GPU.
const (
	DefaultListen           = "127.0.0.1:8000"
	DefaultModel            = "kvrouter-demo"
	DefaultBlockSize        = 16
	DefaultGPUBlocks        = 4096
	DefaultRunnerBlocks     = 8192
	DefaultKVBytesPerToken  = 64
	DefaultControlPort      = 25000
	DefaultAdvertiseHost    = "127.0.0.1"
	DefaultMaxNumSeqs       = 256
	DefaultMaxBatchedTokens = 8192
	DefaultMaxModelLen      = 32768
	DefaultMaxTokens        = 16
	DefaultPrefillPerToken  = 75 * time.Microsecond
	DefaultDecodePerToken   = 10 * time.Millisecond
	DefaultRestorePerToken  = 5 * time.Microsecond
	DefaultEventsEndpoint   = "tcp://*:5557"
	DefaultReplayEndpoint   = "tcp://*:5657"
	// DefaultChatTemplate is the demo tokenizer's format; a --tokenizer's
	// model renders chats with its own template.
	DefaultChatTemplate = "chatml"
	maxTP               = 64 // the catalog keeps one bit per TP shard
)

// Config configures an Engine. Zero fields take the defaults above, except
// where noted.
type Config struct {
	Listen string // HTTP listen address; port 0 picks one
	Model  string
	Flavor Flavor
	// EventFormat is FormatMap or FormatArray. vLLM's array form cannot say
	// that a block is runner-owned, so it is refused for the vLLM flavour.
	EventFormat string

	BlockSize        int // tokens per KV block (SGLang page_size, vLLM block_size)
	DP, TP           int
	GPUBlocks        int // GPU KV blocks per DP rank
	RunnerBlocks     int // blocks per runner shard (one shard per TP rank)
	KVBytesPerToken  int // bytes of simulated KV per token, split across TP shards
	MaxNumSeqs       int
	MaxBatchedTokens int
	MaxModelLen      int

	// ControlPort is the runners' base port: attention rank a (DP rank d,
	// TP rank t: a = d*TP + t) serves peers on ControlPort + a.
	ControlPort int
	// ControlHost is the runners' bind host; "" binds 127.0.0.1 when
	// AdvertiseHost is loopback, else every interface.
	ControlHost   string
	AdvertiseHost string
	// RunnerSecret is the shared secret runners prove to each other (the
	// command reads it from --runner-secret-file or KVROUTER_RUNNER_SECRET).
	// It is required when the runners bind beyond loopback, unless
	// RunnerInsecure opts out.
	RunnerSecret   string
	RunnerInsecure bool

	ModelSeed uint64
	// HashSeed is vLLM's PYTHONHASHSEED for sha256_cbor; "" is vLLM's default.
	HashSeed string

	PrefillPerToken time.Duration // per prompt token computed
	DecodePerToken  time.Duration // per step: the inter-token latency
	RestorePerToken time.Duration // per token copied from the runner into the GPU pool
	// PullSetup is the simulated fixed cost of one peer pull, paid before
	// its blocks move (which they really do, over TCP, in real time): what
	// a fleet spends per transfer on the transfer engine's setup, the
	// source's scheduling of the read and the control round trips, all of
	// which loopback has next to none of. 0 adds nothing.
	PullSetup time.Duration
	Speedup   float64 // simulated time runs this much faster than the wall

	EventsEndpoint string // PUB per DP rank (port + rank); binds on a wildcard
	ReplayEndpoint string // replay ROUTER per DP rank; "none" disables
	// SnapshotEndpoint, SGLang flavour only, is the snapshot-v1 ROUTER per
	// DP rank; "" serves none. With it the live topics name each rank's
	// publisher epoch, as SGLang's do.
	SnapshotEndpoint string

	Topic string
	// EventsConnect, when set, dials this subscriber (llm-d style) instead
	// of binding EventsEndpoint; the topic defaults to kv@<host>:<port>@<model>.
	EventsConnect string

	// Tokenizer is the model's tokenizer: a tokenizer.json or a model
	// directory (with tokenizer_config.json and its chat template), as
	// the engine loads them; "" is the embedded demo tokenizer.
	Tokenizer string
	// LoRAs are the LoRA adapters served besides Model, by the names
	// requests give them (vLLM's --lora-modules NAME=PATH, SGLang's
	// --lora-paths NAME=PATH).
	LoRAs []string

	// ChatTemplate overrides the model's chat template: a built-in format
	// (chatml, qwen2, qwen2.5, qwen3, llama3, plain) or a Jinja file.
	ChatTemplate string

	// Role is the engine's part in disaggregated serving: RoleAggregated
	// (""), RolePrefill or RoleDecode (see pd.go).
	Role string
	// BootstrapPort is an SGLang prefill engine's bootstrap server port
	// (disaggregation_bootstrap_port); 0 is SGLang's default, 8998.
	BootstrapPort int
	// KVTransferTimeout bounds a disaggregated request's hand-over, in
	// wall time (the network's, not the simulation's): how long a prefill
	// engine keeps its blocks for the decode engine to pull, and how long a
	// decode engine waits for them.
	KVTransferTimeout time.Duration

	Clock  Clock
	Logger *slog.Logger
}

// replayNone disables the replay endpoint.
const replayNone = "none"

func (c *Config) setDefaults() {
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.Model == "" {
		c.Model = DefaultModel
	}
	if c.Flavor == "" {
		c.Flavor = SGLang
	}
	if c.EventFormat == "" {
		c.EventFormat = FormatMap
	}
	def(&c.BlockSize, DefaultBlockSize)
	def(&c.DP, 1)
	def(&c.TP, 1)
	def(&c.GPUBlocks, DefaultGPUBlocks)
	def(&c.RunnerBlocks, DefaultRunnerBlocks)
	def(&c.KVBytesPerToken, DefaultKVBytesPerToken)
	def(&c.MaxNumSeqs, DefaultMaxNumSeqs)
	def(&c.MaxBatchedTokens, DefaultMaxBatchedTokens)
	def(&c.MaxModelLen, DefaultMaxModelLen)
	def(&c.ControlPort, DefaultControlPort)
	if c.AdvertiseHost == "" {
		c.AdvertiseHost = DefaultAdvertiseHost
	}
	if c.Speedup == 0 {
		c.Speedup = 1
	}
	if c.EventsEndpoint == "" {
		c.EventsEndpoint = DefaultEventsEndpoint
	}
	if c.ReplayEndpoint == "" {
		c.ReplayEndpoint = DefaultReplayEndpoint
	}
	if c.Role == "" {
		c.Role = RoleAggregated
	}
	if c.Role == RolePrefill && c.Flavor == SGLang && c.BootstrapPort == 0 {
		c.BootstrapPort = DefaultBootstrapPort
	}
	if c.KVTransferTimeout == 0 {
		c.KVTransferTimeout = DefaultKVTransferTimeout
	}
	if c.Clock == nil {
		c.Clock = realClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func configErr(flag, format string, args ...any) error {
	return fmt.Errorf("%w: --%s: %s", ErrConfig, flag, fmt.Sprintf(format, args...))
}

// validate checks a defaulted config.
func (c *Config) validate() error {
	switch c.Flavor {
	case SGLang, VLLM:
	default:
		return configErr("flavor", "%q is not a flavour; use %q or %q", c.Flavor, SGLang, VLLM)
	}
	switch c.EventFormat {
	case FormatMap:
	case FormatArray:
		if c.Flavor == VLLM {
			return configErr("event-format", "vLLM's array form cannot carry ownership \"kvcr\", so runner-owned inventory could not be reported; use %q", FormatMap)
		}
	default:
		return configErr("event-format", "%q is not a format; use %q or %q", c.EventFormat, FormatMap, FormatArray)
	}
	for _, f := range []struct {
		flag string
		v    int
	}{
		{"block-size", c.BlockSize}, {"dp", c.DP}, {"tp", c.TP}, {"gpu-blocks", c.GPUBlocks},
		{"runner-blocks", c.RunnerBlocks}, {"kv-bytes-per-token", c.KVBytesPerToken},
		{"max-num-seqs", c.MaxNumSeqs}, {"max-batched-tokens", c.MaxBatchedTokens},
		{"max-model-len", c.MaxModelLen},
	} {
		if f.v < 1 {
			return configErr(f.flag, "must be at least 1, got %d", f.v)
		}
	}
	seen := map[string]bool{c.Model: true}
	for _, a := range c.LoRAs {
		if a == "" || seen[a] || strings.ContainsAny(a, ":") {
			return configErr("lora", "%q: want a name of its own, not the model's or another adapter's, without ':'", a)
		}
		seen[a] = true
	}
	if len(c.LoRAs) > 0 && c.format() == kvencode.SGLangArray {
		return configErr("lora", "SGLang's array event form cannot carry lora_name; use --event-format %s", FormatMap)
	}
	if c.TP > maxTP {
		return configErr("tp", "at most %d, got %d", maxTP, c.TP)
	}
	if bb := c.KVBytesPerToken * c.BlockSize; bb%c.TP != 0 {
		return configErr("kv-bytes-per-token", "%d × block size %d = %d bytes per block does not split evenly across %d TP shards", c.KVBytesPerToken, c.BlockSize, bb, c.TP)
	}
	if last := c.ControlPort + c.DP*c.TP - 1; c.ControlPort < 1 || last > 65535 {
		return configErr("control-port", "%d leaves attention ranks outside 1..65535 (last port %d)", c.ControlPort, last)
	}
	if c.Speedup <= 0 {
		return configErr("speedup", "must be positive, got %g", c.Speedup)
	}
	if c.PrefillPerToken < 0 || c.DecodePerToken < 0 || c.RestorePerToken < 0 {
		return configErr("prefill-us-per-token", "timings must not be negative")
	}
	if c.PullSetup < 0 {
		return configErr("pull-setup-ms", "must not be negative, got %v", c.PullSetup)
	}
	if c.AdvertiseHost == "" {
		return configErr("advertise-host", "must name the host peers dial")
	}
	if c.SnapshotEndpoint != "" && c.Flavor != SGLang {
		return configErr("kv-events-snapshot-endpoint", "snapshot-v1 is SGLang's; vLLM serves no snapshot")
	}
	switch c.Role {
	case RoleAggregated, RolePrefill, RoleDecode:
	default:
		return configErr("role", "%q is not a role; use %q, %q or %q", c.Role, RoleAggregated, RolePrefill, RoleDecode)
	}
	if c.BootstrapPort != 0 && (c.Role != RolePrefill || c.Flavor != SGLang) {
		return configErr("bootstrap-port", "only an SGLang prefill engine (--flavor sglang --role prefill) runs a bootstrap server")
	}
	if c.BootstrapPort < 0 || c.BootstrapPort > 65535 {
		return configErr("bootstrap-port", "%d is not a port", c.BootstrapPort)
	}
	if c.KVTransferTimeout < 0 {
		return configErr("kv-transfer-timeout", "must not be negative, got %v", c.KVTransferTimeout)
	}
	if host := c.controlBindHost(); c.RunnerSecret == "" && !c.RunnerInsecure && !runner.LoopbackHost(host) {
		if host == "" {
			host = "every interface"
		}
		return fmt.Errorf("%w: --runner-secret-file: %w: the runners bind %s (--control-host, --advertise-host), so anyone who reaches their ports could pull KV blocks; give every member the same secret with --runner-secret-file or %s, or pass --runner-insecure to serve without one",
			ErrConfig, runner.ErrNoSecret, host, runner.SecretEnv)
	}
	return nil
}

// controlBindHost is where runners listen: loopback when peers are local,
// else every interface ("").
func (c *Config) controlBindHost() string {
	if c.ControlHost != "" {
		return c.ControlHost
	}
	if runner.LoopbackHost(c.AdvertiseHost) {
		return c.AdvertiseHost
	}
	return ""
}

func (c *Config) format() kvencode.Format {
	switch {
	case c.Flavor == SGLang && c.EventFormat == FormatArray:
		return kvencode.SGLangArray
	case c.Flavor == SGLang:
		return kvencode.SGLangMap
	}
	return kvencode.VLLMMap
}

func (c *Config) vllmSeed() string {
	if c.HashSeed == "" {
		return kvhash.VLLMDefaultSeed
	}
	return c.HashSeed
}

// loraID is vLLM's lora_int_id of an adapter: its position among LoRAs,
// from 1.
func (c *Config) loraID(name string) int64 {
	return int64(slices.Index(c.LoRAs, name) + 1)
}

// adapter returns the LoRA adapter a request names, "" for the base
// model, as the flavour's engine reads it: vLLM from model naming an
// adapter; SGLang from model "base:adapter", else from lora_path.
func (c *Config) adapter(model, loraPath string) (string, error) {
	var lora string
	switch {
	case model == "" || model == c.Model:
	case c.Flavor == VLLM && slices.Contains(c.LoRAs, model):
		lora = model
	case c.Flavor == SGLang && strings.HasPrefix(model, c.Model+":") && slices.Contains(c.LoRAs, model[len(c.Model)+1:]):
		lora = model[len(c.Model)+1:]
	default:
		return "", fmt.Errorf("%w: the model %q does not exist; this engine serves %q (LoRA adapters: %v)", errModelNotFound, model, c.Model, c.LoRAs)
	}
	if c.Flavor == SGLang && lora == "" && loraPath != "" {
		if !slices.Contains(c.LoRAs, loraPath) {
			return "", badRequest("lora_path: %q is not a loaded adapter (%v)", loraPath, c.LoRAs)
		}
		lora = loraPath
	}
	return lora, nil
}

func (c *Config) blockBytes() int { return c.KVBytesPerToken * c.BlockSize }

// controlPort is the port of DP rank d's TP rank t runner.
func (c *Config) controlPort(d, t int) int { return c.ControlPort + d*c.TP + t }

// model loads the tokenizer and chat template the engine serves with.
func (c *Config) model() (*tokenizer.Model, error) {
	m := tokenizer.Demo()
	if c.Tokenizer != "" {
		var err error
		if m, err = tokenizer.LoadModel(c.Tokenizer, ""); err != nil {
			return nil, configErr("tokenizer", "%s: %v", c.Tokenizer, err)
		}
	}
	if c.ChatTemplate != "" {
		t, err := tokenizer.LoadChatTemplate(c.ChatTemplate)
		if err != nil {
			return nil, configErr("chat-template", "%s: %v", c.ChatTemplate, err)
		}
		copied := *m // the demo model is shared
		copied.SetChatTemplate(t)
		m = &copied
	}
	return m, nil
}
