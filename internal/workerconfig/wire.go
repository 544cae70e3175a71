package workerconfig

// Every wire name this package reads or writes lives here: engine option
// names (as the operator types them), the registration runtime-data keys of a
// hint-capable worker, and the protocol strings of descriptors.

// Registration runtime-data keys (SPEC 4.1), current names.
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

// OwnerTopicPrefix starts every owner-specific event topic.
const OwnerTopicPrefix = "kvcr-owner."

// Values found inside configurations.
const (
	backendKVCR       = "kvcr"
	publisherZMQ      = "zmq"
	publisherNull     = "null"
	disaggNull        = "null"
	disaggPrefill     = "prefill"
	disaggDecode      = "decode"
	vllmWorkerAgg     = "agg"
	schemeTCP         = "tcp://"
	schemeIPC         = "ipc://"
	schemeInproc      = "inproc://"
	defaultEventsAddr = "tcp://*:5557"
	defaultDialHost   = "127.0.0.1"
)

// SGLang server arguments (ServerArgs field names, as /get_server_info returns them).
const (
	sglModelPath          = "model_path"
	sglServedModelName    = "served_model_name"
	sglPageSize           = "page_size"
	sglTPSize             = "tp_size"
	sglDPSize             = "dp_size"
	sglEnableDPAttention  = "enable_dp_attention"
	sglPPSize             = "pp_size"
	sglAttnCPSize         = "attn_cp_size"
	sglNNodes             = "nnodes"
	sglNodeRank           = "node_rank"
	sglTokenizerWorkerNum = "tokenizer_worker_num"
	sglDisaggregationMode = "disaggregation_mode"
	sglEnableLinker       = "enable_unified_cache_external_linker"
	sglLinkerBackend      = "unified_cache_external_linker_backend"
	sglHiCacheBackend     = "hicache_storage_backend"
	sglHiCacheEnabled     = "enable_hierarchical_cache"
	sglExtraConfig        = "hicache_storage_backend_extra_config"
	sglKVEventsConfig     = "kv_events_config"
	sglHost               = "host"
	sglPort               = "port"
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
	kvcrControlPort          = "control_port"
	kvcrControlPorts         = "control_ports"
	kvcrControlHost          = "control_host"
	kvcrControlAdvertiseHost = "control_advertise_host"
	kvcrAdvertiseHost        = "advertise_host"
	kvcrEnableRemoteHint     = "enable_remote_hint"
	kvcrPublishInventory     = "publish_inventory"
	kvcrServiceSocketPath    = "kvcr_service_socket_path"
	kvcrLocalDRAMPerWorker   = "local_dram_bytes_per_worker"
	kvcrLegacyLocalDRAM      = "local_dram_bytes"
	kvcrOperationTimeoutMS   = "operation_timeout_ms"
	kvcrAbandonTimeoutMS     = "abandon_timeout_ms"
	kvcrOwnerID              = "owner_id"
	kvcrOwnerIDs             = "owner_ids"
	kvcrRouterCapabilities   = "router_capabilities"
	kvcrBlockSize            = "block_size"
)

// kv_events_config keys.
const (
	evPublisher      = "publisher"
	evEndpoint       = "endpoint"
	evReplayEndpoint = "replay_endpoint"
	evBufferSteps    = "buffer_steps"
	evHWM            = "hwm"
	evMaxQueueSize   = "max_queue_size"
	evTopic          = "topic"
	evSnapshot       = "snapshot_endpoint"
	evEnable         = "enable_kv_cache_events" // vLLM only
)

// vLLM engine arguments.
const (
	vlModel              = "model"
	vlServedModelName    = "served_model_name"
	vlBlockSize          = "block_size"
	vlTPSize             = "tensor_parallel_size"
	vlPPSize             = "pipeline_parallel_size"
	vlDCPSize            = "decode_context_parallel_size"
	vlPCPSize            = "prefill_context_parallel_size"
	vlNNodes             = "nnodes"
	vlDPSize             = "data_parallel_size"
	vlDPSizeLocal        = "data_parallel_size_local"
	vlDPRank             = "data_parallel_rank"
	vlDPStartRank        = "data_parallel_start_rank"
	vlKVTransferConfig   = "kv_transfer_config"
	vlConnectorExtra     = "kv_connector_extra_config"
	vlSecondaryTiers     = "secondary_tiers"
	vlKVEventsConfig     = "kv_events_config"
	vlWorkerType         = "worker_type"         // Dynamo's role, not a vLLM argument
	vlDisaggregationMode = "disaggregation_mode" // Dynamo's role flag spelling
	vlHost               = "host"
	vlPort               = "port"
)
