// This file holds the wire names: runtime data keys, the kv.fetch envelope, placements.

package hints

// Every wire name this package reads or writes. These names were renamed
// several times upstream; keeping them here makes the next rename a one-file
// change.

// Registration runtime data (docs/wire.md §5.1), current and older names.
const (
	keyCapability          = "router_hint"
	keyCapabilityOld       = "kv_hint.transfer.v1"
	keyWorkerType          = "router_hint_worker_type"
	keyWorkerTypeOld       = "kv_hint_transfer_worker_type"
	keySourceEndpoints     = "router_hint_source_control_endpoints"
	keySourceEndpointsOld  = "kv_hint_transfer_source_control_endpoints"
	workerTypeAggregated   = "aggregated"
	workerTypeAggShort     = "agg"
	workerTypePrefill      = "prefill"
	workerTypeDecode       = "decode"
	workerTypeUnknownLabel = "unknown"
)

// The kv.fetch@1.0 envelope and its legacy flat payload (docs/wire.md §6.3).
const (
	keyProtocolVersion = "protocol_version"
	keyMessageID       = "message_id"
	keyActions         = "actions"
	keyActionID        = "action_id"
	keyActionType      = "action_type"
	keyActionVersion   = "action_version"
	keyPayload         = "payload"
	keySourceEndpoint  = "source_control_endpoint"
	keyBlockHashes     = "block_hashes"
	keyMode            = "mode"

	protocolVersion = "0.1"
	actionKVFetch   = "kv.fetch"
	actionVersion   = "1.0"
	firstActionID   = "a1"
	modeCopy        = "copy"
)

// Where a hint sits in an inference request body.
const (
	keyKVTransferParams = "kv_transfer_params"
	keyVLLMHint         = "kv_hint"        // inside kv_transfer_params, envelope
	keyVLLMHintOld      = "router_hint"    // inside kv_transfer_params, flat
	keySGLangHint       = "kv_hints"       // top level, envelope
	keySGLangHintOld    = "kv_router_hint" // top level, flat
)

// Placement names as written in configuration.
const (
	placementVLLM      = "vllm"
	placementVLLMOld   = "vllm-legacy"
	placementSGLang    = "sglang"
	placementSGLangOld = "sglang-legacy"
)
