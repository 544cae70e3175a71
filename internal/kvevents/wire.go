package kvevents

// Wire names of the engine event formats (SPEC 2.2–2.3). They change often
// upstream; every one lives here.
const (
	// Envelope map keys.
	keyTS     = "ts"
	keyEvents = "events"
	keyDPRank = "data_parallel_rank"

	// Event tag key and tags.
	keyType     = "type"
	tagStored   = "BlockStored"
	tagRemoved  = "BlockRemoved"
	tagCleared  = "AllBlocksCleared"
	ownerRunner = "kvcr"

	// Event field keys.
	keyBlockHashes   = "block_hashes"
	keyParent        = "parent_block_hash"
	keyTokenIDs      = "token_ids"
	keyBlockSize     = "block_size"
	keyLoRAID        = "lora_id"
	keyMedium        = "medium"
	keyLoRAName      = "lora_name"
	keyExtraKeys     = "extra_keys"
	keyGroupIdx      = "group_idx"
	keySpecKind      = "kv_cache_spec_kind"
	keySlidingWindow = "kv_cache_spec_sliding_window"
	keyLocality      = "locality"
	keyOwnership     = "ownership"
	keySessionID     = "session_id"
	keyCacheSalt     = "cache_salt"

	// mediumLinker is how SGLang's KVCR linker marks runner-owned inventory.
	mediumLinker = "EXTERNAL"
)

// mediumTier maps every medium name engines send to its tier, returning
// the name as a constant so that decoding it does not copy. Names are
// matched exactly: an unknown one drops its event rather than guessing.
func mediumTier(m []byte) (string, Tier, bool) {
	switch string(m) {
	case "GPU":
		return "GPU", TierDevice, true
	case "DEVICE":
		return "DEVICE", TierDevice, true
	case "CPU":
		return "CPU", TierHost, true
	case "CPU_PINNED":
		return "CPU_PINNED", TierHost, true
	case "CPU_TIER1":
		return "CPU_TIER1", TierHost, true
	case "CPU_TIER2":
		return "CPU_TIER2", TierDisk, true
	case "DISK":
		return "DISK", TierDisk, true
	case "NVME":
		return "NVME", TierDisk, true
	case "STORAGE":
		return "STORAGE", TierDisk, true
	case "FS":
		return "FS", TierDisk, true
	case "OBJ":
		return "OBJ", TierDisk, true
	case "SHARED_STORAGE":
		return "SHARED_STORAGE", TierDisk, true
	case mediumLinker:
		return mediumLinker, TierExternal, true
	case "NETWORK":
		return "NETWORK", TierExternal, true
	case "REMOTE":
		return "REMOTE", TierExternal, true
	case "SHARED":
		return "SHARED", TierExternal, true
	}
	return "", 0, false
}

// DefaultMedium is the medium name the Encoder writes for a tier when an
// event does not carry its own.
func DefaultMedium(t Tier) string {
	switch t {
	case TierHost:
		return "CPU"
	case TierDisk:
		return "DISK"
	case TierExternal:
		return mediumLinker
	}
	return "GPU"
}

// intern returns a constant for string values common enough on the wire
// that decoding them should not copy.
func intern(v []byte) (string, bool) {
	switch string(v) {
	case "full_attention":
		return "full_attention", true
	case "sliding_window":
		return "sliding_window", true
	case "mamba":
		return "mamba", true
	case "LOCAL":
		return "LOCAL", true
	case "REMOTE":
		return "REMOTE", true
	}
	return "", false
}
