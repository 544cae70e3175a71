// This file holds the engine formats' wire names: event tags, keys, media and their tiers.

package kvevents

// Wire names of the engine event formats (docs/wire.md §3.1–3.9). They change often
// upstream; every one lives here, for the decoder and for kvencode, which
// writes them as the engines do.
const (
	// Envelope map keys.
	KeyTS     = "ts"
	KeyEvents = "events"
	KeyDPRank = "data_parallel_rank"

	// Event tag key and tags.
	KeyType    = "type"
	TagStored  = "BlockStored"
	TagRemoved = "BlockRemoved"
	TagCleared = "AllBlocksCleared"
	OwnerKVCR  = "kvcr"

	// Event field keys.
	KeyBlockHashes   = "block_hashes"
	KeyParent        = "parent_block_hash"
	KeyTokenIDs      = "token_ids"
	KeyBlockSize     = "block_size"
	KeyLoRAID        = "lora_id"
	KeyMedium        = "medium"
	KeyLoRAName      = "lora_name"
	KeyExtraKeys     = "extra_keys"
	KeyGroupIdx      = "group_idx"
	KeySpecKind      = "kv_cache_spec_kind"
	KeySlidingWindow = "kv_cache_spec_sliding_window"
	KeyLocality      = "locality"
	KeyOwnership     = "ownership"
	KeySessionID     = "session_id"
	KeyCacheSalt     = "cache_salt"

	// MediumLinker is how SGLang's KVCR linker marks runner-owned inventory.
	MediumLinker = "EXTERNAL"
)

// MediumTier maps every medium name engines send to its tier, returning
// the name as a constant so that decoding it does not copy. Names are
// matched exactly: an unknown one drops its event rather than guessing.
func MediumTier(m []byte) (string, Tier, bool) {
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
	case MediumLinker:
		return MediumLinker, TierExternal, true
	case "NETWORK":
		return "NETWORK", TierExternal, true
	case "REMOTE":
		return "REMOTE", TierExternal, true
	case "SHARED":
		return "SHARED", TierExternal, true
	}
	return "", 0, false
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
