// Package kvevents holds kvrouter's own typed KV events and decodes the
// engine wire formats (vLLM and SGLang, msgpack over ZMQ) into them.
//
// Protocol decoding stays at this edge: every other package speaks the types
// in this file, never msgpack.
package kvevents

// Tier is where a block resides.
type Tier uint8

const (
	TierDevice   Tier = iota // GPU memory
	TierHost                 // host DRAM (CPU offload)
	TierDisk                 // local disk or shared storage
	TierExternal             // a runner's pool reported as external (SGLang linker)
)

var tierNames = [...]string{"device", "host", "disk", "external"}

func (t Tier) String() string {
	if int(t) < len(tierNames) {
		return tierNames[t]
	}
	return "unknown"
}

// Ownership says who owns a block's residency.
type Ownership uint8

const (
	// OwnedByWorker is framework-owned residency: it ends with the engine process.
	OwnedByWorker Ownership = iota
	// OwnedByRunner is runner-owned residency (ownership="kvcr", or SGLang
	// linker medium="EXTERNAL"): it belongs to a cache owner and can outlive
	// the engine.
	OwnedByRunner
)

func (o Ownership) String() string {
	if o == OwnedByRunner {
		return "kvcr"
	}
	return "worker"
}

// Kind is an event's type.
type Kind uint8

const (
	KindStored Kind = iota + 1
	KindRemoved
	KindCleared
)

func (k Kind) String() string {
	switch k {
	case KindStored:
		return "BlockStored"
	case KindRemoved:
		return "BlockRemoved"
	case KindCleared:
		return "AllBlocksCleared"
	}
	return "unknown"
}

// Event is one decoded engine KV event. Block hashes are the engine's own,
// reinterpreted bit for bit as uint64; the router never derives its identity
// from them (see kvhash), it keeps them to link parents, apply removals and
// fill hints.
type Event struct {
	Kind Kind

	// BlockHashes: Stored and Removed.
	BlockHashes []uint64

	// Stored only.
	ParentHash uint64
	HasParent  bool
	TokenIDs   []uint32 // len == len(BlockHashes)*BlockSize unless Placeholder
	BlockSize  int
	LoRAID     int64
	HasLoRAID  bool
	LoRAName   string
	// CacheSalt is SGLang's cache_salt, or vLLM's: vLLM puts a request's
	// salt in its first block's extra_keys, so only a root store names it.
	CacheSalt string
	SessionID string
	// BlockExtra, when set, has one entry per block: 0 for a block whose
	// engine identity is its tokens (with the LoRA name and salt above),
	// else a digest of the extra keys vLLM mixed into it (multimodal
	// inputs, prompt embeddings), which no request's tokens reproduce.
	BlockExtra []uint64
	// Placeholder marks CPU-offload events without token ids (token_ids=[]
	// or block_size=0): they cannot be indexed by tokens.
	Placeholder bool
	// ExtraKeys: a vLLM store carried extra_keys (a list, even of nils), so
	// a root store tells its cache salt, or that it has none. Without them
	// a root's salt is not known.
	ExtraKeys bool
	// SaltUnknown is set downstream (ingest), never by the decoder: the
	// store's cache salt cannot be known, so no request may match its
	// blocks nor a hint name them (docs/wire.md §3.3).
	SaltUnknown bool

	// Stored and Removed.
	Tier     Tier
	Medium   string // as sent, for operators; "" when nil
	GroupIdx int
	SpecKind string // kv_cache_spec_kind, "" when absent
	Locality string // "LOCAL" | "REMOTE" | ""

	// All kinds.
	Ownership Ownership
}

// Batch is one decoded message payload.
type Batch struct {
	TS        float64
	DPRank    int
	HasDPRank bool
	Events    []Event
}
