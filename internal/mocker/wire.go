// This file holds the engine's wire names: paths, OpenAI names, media, config keys, metrics.

package mocker

// Every wire name the mocker reads or writes: HTTP paths and headers, the
// OpenAI request and response fields, engine configuration keys, event
// mediums and metric names. Upstream renames land here and nowhere else.

// HTTP paths.
const (
	pathCompletions   = "/v1/completions"
	pathChat          = "/v1/chat/completions"
	pathModels        = "/v1/models"
	pathTokenize      = "/tokenize"
	pathHealth        = "/health"
	pathMetrics       = "/metrics"
	pathServerInfo    = "/get_server_info"      // SGLang flavour
	pathEngineArgs    = "/kvrouter/engine_args" // vLLM flavour
	pathAdminEvict    = "/admin/evict"
	pathAdminReset    = "/admin/reset"
	pathAdminPull     = "/admin/pull"
	headerDPRank      = "X-Kvrouter-Dp-Rank"
	headerVLLMDPRank  = "X-Data-Parallel-Rank" // vLLM's, engine-local
	headerContentType = "Content-Type"
	contentJSON       = "application/json"
	contentSSE        = "text/event-stream"
	sseData           = "data: "
	sseDone           = "data: [DONE]\n\n"
)

// OpenAI object names and finish reasons.
const (
	objectCompletion = "text_completion"
	objectChat       = "chat.completion"
	objectChatChunk  = "chat.completion.chunk"
	objectList       = "list"
	objectModel      = "model"
	finishLength     = "length"
	roleAssistant    = "assistant"
	ownedBy          = "kvrouter"
	errInvalidReq    = "invalid_request_error"
	errNotFound      = "not_found_error"
	errServer        = "server_error"
	idPrefixCmpl     = "cmpl-"
	idPrefixChat     = "chatcmpl-"
)

// Admin evict tiers.
const (
	tierGPU    = "gpu"
	tierRunner = "runner"
	tierAll    = "all"
)

// Event mediums per flavour (docs/wire.md §3.6–3.7): SGLang's KVCR linker reports
// runner-owned blocks as EXTERNAL; vLLM's connector as CPU with
// ownership "kvcr".
const (
	mediumGPU      = "GPU"
	mediumExternal = "EXTERNAL"
	mediumCPU      = "CPU"
	specKindFull   = "full_attention" // vLLM's kv_cache_spec_kind of a full-attention group
)

// Engine configuration: SGLang ServerArgs keys (as /get_server_info returns
// them) and the KVCR linker's extra-config keys.
const (
	sglMaxRunning     = "max_running_requests"
	sglChunkedPrefill = "chunked_prefill_size"
	sglContextLength  = "context_length"
	sglRandomSeed     = "random_seed"
	sglStatus         = "status"
	sglVersion        = "version"
	sglDisaggNull     = "null"
	sglStatusReady    = "ready"
	// SGLang decode servers run without a radix cache unless told.
	sglDecodeRadixCache = "disaggregation_decode_enable_radix_cache"

	kvcrBackend = "kvcr"
)

// Engine configuration: vLLM engine arguments and the KVCR secondary tier.
const (
	vlMaxNumSeqs         = "max_num_seqs"
	vlMaxBatchedTokens   = "max_num_batched_tokens"
	vlMaxModelLen        = "max_model_len"
	vlPrefixCaching      = "enable_prefix_caching"
	vlHashAlgo           = "prefix_caching_hash_algo"
	vlHashAlgoSHA256CBOR = "sha256_cbor"
	vlSeed               = "seed"
	vlKVConnector        = "kv_connector"
	vlKVConnectorKVCR    = "KVCRConnector"
	vlKVRole             = "kv_role"
	vlKVRoleBoth         = "kv_both"
	vlTierName           = "name"
	vlRouterCapabilities = "router_capabilities"
	vlCapRouterHint      = "router_hint"
	vlAdvertiseHost      = "control_advertise_host"
	vlControlPorts       = "control_ports"
	vlWorkerAgg          = "agg"
)

// kv_events_config keys (both engines).
const (
	evPublisherZMQ = "zmq"
)

// Metric names and labels.
const (
	metricRunning       = "kvrouter_mocker_requests_running"
	metricWaiting       = "kvrouter_mocker_requests_waiting"
	metricGPUUsed       = "kvrouter_mocker_gpu_kv_blocks_used"
	metricGPUCached     = "kvrouter_mocker_gpu_kv_blocks_cached"
	metricGPUTotal      = "kvrouter_mocker_gpu_kv_blocks_total"
	metricRunnerUsed    = "kvrouter_mocker_runner_blocks_used"
	metricRunnerTotal   = "kvrouter_mocker_runner_blocks_total"
	metricRunnerExpired = "kvrouter_mocker_runner_serve_expired_total"
	metricRunnerConns   = "kvrouter_mocker_runner_peer_connections"
	metricRunnerRefused = "kvrouter_mocker_runner_peer_refused_total"
	metricRunnerHSTO    = "kvrouter_mocker_runner_peer_handshake_timeouts_total"
	metricPrefillTokens = "kvrouter_mocker_prefill_tokens_computed_total"
	metricCachedTokens  = "kvrouter_mocker_cached_tokens_total"
	metricPeerTokens    = "kvrouter_mocker_peer_restored_tokens_total"
	metricHintOutcomes  = "kvrouter_mocker_hint_outcomes_total"
	metricPeerPull      = "kvrouter_mocker_peer_pull_seconds"
	labelDPRank         = "dp_rank"
	labelTPRank         = "tp_rank"
	labelSource         = "source"
	labelOutcome        = "outcome"
	labelReason         = "reason"
	reasonFull          = "full"         // the runner's server had MaxConns open
	reasonClientLimit   = "client_limit" // the client had MaxConnsPerClient open
	sourceGPU           = "gpu"
	sourceRunner        = "runner"
	sourcePeer          = "peer"
	outcomeNone         = "none"     // the request carried no hint
	outcomeInvalid      = "invalid"  // the hint failed the consumer rules
	outcomeLocal        = "local"    // nothing hinted beyond what the rank already holds
	outcomeRestored     = "restored" // every wanted block was pulled
	outcomePartial      = "partial"  // some were pulled, the rest recomputed
	outcomeFailed       = "failed"   // none were pulled
)
