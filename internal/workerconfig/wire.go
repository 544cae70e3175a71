// This file holds the wire names: runtime-data keys, engine and mode values, configuration keys.

package workerconfig

// Every wire name this package reads or writes lives here: engine option
// names (as the operator types them), the registration runtime-data keys of a
// hint-capable worker, and the protocol strings of descriptors.

// Registration runtime-data keys (docs/wire.md §5.1), current names.
const (
	KeyHintCapability         = "router_hint"
	KeyWorkerType             = "router_hint_worker_type"
	KeySourceControlEndpoints = "router_hint_source_control_endpoints"
)

// Older names of the same keys, still accepted by readers.
const (
	LegacyKeyHintCapability         = "kv_hint.transfer.v1"
	LegacyKeyWorkerType             = "kv_hint_transfer_worker_type"
	LegacyKeySourceControlEndpoints = "kv_hint_transfer_source_control_endpoints"
)

// Engine names.
const (
	EngineSGLang Engine = "sglang"
	EngineVLLM   Engine = "vllm"
)

// Worker types (router_hint_worker_type values).
const (
	WorkerAggregated WorkerType = "aggregated"
	WorkerPrefill    WorkerType = "prefill"
	WorkerDecode     WorkerType = "decode"
)

// Runner modes.
const (
	RunnerNone          RunnerMode = "none"
	RunnerLinker        RunnerMode = "linker"         // SGLang unified cache external linker, backend kvcr
	RunnerHiCache       RunnerMode = "hicache"        // SGLang HiCache storage backend kvcr
	RunnerSecondaryTier RunnerMode = "secondary_tier" // vLLM secondary tier advertising router_hint
)

// Inventory aggregation rules (Descriptor.InventoryAggregation).
const (
	// AggregateAllTPRanks: a runner-owned block of a DP rank is published only
	// while every TP rank's runner of that DP rank holds its shard.
	AggregateAllTPRanks = "all_tp_ranks"
	// AggregateEngine: the engine's scheduler already reports one inventory
	// per DP rank.
	AggregateEngine = "engine"
)

// Values found inside configurations.
const (
	backendKVCR       = "kvcr"
	publisherZMQ      = "zmq"
	publisherNull     = "null"
	disaggNull        = "null"
	disaggPrefill     = "prefill"
	disaggDecode      = "decode"
	vllmWorkerAgg     = "agg"
	kvRoleProducer    = "kv_producer"
	kvRoleConsumer    = "kv_consumer"
	kvRoleBoth        = "kv_both"
	schemeTCP         = "tcp://"
	schemeIPC         = "ipc://"
	schemeInproc      = "inproc://"
	defaultEventsAddr = "tcp://*:5557"
	defaultDialHost   = "127.0.0.1"
)

// SGLang server arguments (ServerArgs field names, as /get_server_info returns them).
const (
	SGLangModelPath          = "model_path"
	SGLangServedModelName    = "served_model_name"
	SGLangPageSize           = "page_size"
	SGLangTPSize             = "tp_size"
	SGLangDPSize             = "dp_size"
	SGLangEnableDPAttention  = "enable_dp_attention"
	SGLangPPSize             = "pp_size"
	SGLangAttnCPSize         = "attn_cp_size"
	SGLangNNodes             = "nnodes"
	SGLangNodeRank           = "node_rank"
	SGLangTokenizerWorkerNum = "tokenizer_worker_num"
	SGLangDisaggregationMode = "disaggregation_mode"
	SGLangBootstrapPort      = "disaggregation_bootstrap_port"
	// DefaultSGLangBootstrapPort is SGLang's disaggregation_bootstrap_port
	// default.
	DefaultSGLangBootstrapPort = 8998
	SGLangEnableLinker         = "enable_unified_cache_external_linker"
	SGLangLinkerBackend        = "unified_cache_external_linker_backend"
	SGLangHiCacheBackend       = "hicache_storage_backend"
	SGLangHiCacheEnabled       = "enable_hierarchical_cache"
	SGLangExtraConfig          = "hicache_storage_backend_extra_config"
	SGLangKVEventsConfig       = "kv_events_config"
	SGLangHost                 = "host"
	SGLangPort                 = "port"
)

// SGLang flag spellings, for guidance in error messages.
const (
	flagExtraConfig       = "--hicache-storage-backend-extra-config"
	flagKVEvents          = "--kv-events-config"
	flagLinker            = "--enable-unified-cache-external-linker"
	flagLinkerBackend     = "--unified-cache-external-linker-backend"
	flagHiCacheBackend    = "--hicache-storage-backend"
	flagHierarchicalCache = "--enable-hierarchical-cache"
)

// KVCR runner options inside the extra config (SGLang) or a secondary tier (vLLM).
const (
	KVCRControlPort          = "control_port"
	KVCRControlPorts         = "control_ports"
	KVCRControlHost          = "control_host"
	KVCRControlAdvertiseHost = "control_advertise_host"
	KVCRAdvertiseHost        = "advertise_host"
	KVCREnableRemoteHint     = "enable_remote_hint"
	KVCRPublishInventory     = "publish_inventory"
	KVCRServiceSocketPath    = "kvcr_service_socket_path"
	KVCRLocalDRAMPerWorker   = "local_dram_bytes_per_worker"
	KVCRLegacyLocalDRAM      = "local_dram_bytes"
	KVCROperationTimeoutMS   = "operation_timeout_ms"
	KVCRAbandonTimeoutMS     = "abandon_timeout_ms"
	KVCROwnerID              = "owner_id"
	KVCROwnerIDs             = "owner_ids"
	KVCRRouterCapabilities   = "router_capabilities"
	KVCRBlockSize            = "block_size"
)

// kv_events_config keys.
const (
	EventsPublisher      = "publisher"
	EventsEndpoint       = "endpoint"
	EventsReplayEndpoint = "replay_endpoint"
	EventsBufferSteps    = "buffer_steps"
	EventsHWM            = "hwm"
	EventsMaxQueueSize   = "max_queue_size"
	EventsTopic          = "topic"
	EventsSnapshot       = "snapshot_endpoint"
	EventsEnable         = "enable_kv_cache_events" // vLLM only
)

// vLLM engine arguments.
const (
	VLLMModel              = "model"
	VLLMServedModelName    = "served_model_name"
	VLLMBlockSize          = "block_size"
	VLLMTPSize             = "tensor_parallel_size"
	VLLMPPSize             = "pipeline_parallel_size"
	VLLMDCPSize            = "decode_context_parallel_size"
	VLLMPCPSize            = "prefill_context_parallel_size"
	VLLMNNodes             = "nnodes"
	VLLMDPSize             = "data_parallel_size"
	VLLMDPSizeLocal        = "data_parallel_size_local"
	VLLMDPRank             = "data_parallel_rank"
	VLLMDPStartRank        = "data_parallel_start_rank"
	VLLMKVTransferConfig   = "kv_transfer_config"
	VLLMConnectorExtra     = "kv_connector_extra_config"
	VLLMSecondaryTiers     = "secondary_tiers"
	VLLMKVEventsConfig     = "kv_events_config"
	VLLMWorkerType         = "worker_type"         // Dynamo's role, not a vLLM argument
	VLLMDisaggregationMode = "disaggregation_mode" // Dynamo's role flag spelling
	VLLMKVRole             = "kv_role"             // in kv_transfer_config
	VLLMHost               = "host"
	VLLMPort               = "port"
)
