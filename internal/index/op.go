// This file holds Op, one change to a source's residency, its conversion from events, its checks.

package index

import (
	"errors"
	"fmt"

	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvhash"
)

// Sentinel errors callers branch on.
var (
	// ErrUnknownParent: a store names a parent engine hash that its source
	// does not hold. It signals an event gap; the layer above must resync
	// the source (Clear, then replay or a Dump) rather than guess.
	ErrUnknownParent = errors.New("index: parent block unknown to its source")
	// ErrBlockSize: an event's block size differs from the one its source
	// registered with (or the index's).
	ErrBlockSize = errors.New("index: block size mismatch")
	// ErrInvalidOp: an op is malformed (lengths disagree, bad tier or kind).
	ErrInvalidOp = errors.New("index: invalid op")
	// ErrPlaceholder: a CPU-offload event without token ids cannot be
	// indexed by tokens (docs/wire.md §3.5); count it and drop it.
	ErrPlaceholder = errors.New("index: placeholder event without token ids")
	// ErrSource: a Source is malformed.
	ErrSource = errors.New("index: invalid source")
	// ErrUnregistered: a Set was asked to apply ops of a source it does not know.
	ErrUnregistered = errors.New("index: source not registered")
)

// OpKind is what an Op does.
type OpKind uint8

const (
	OpStore  OpKind = iota + 1 // the source stored blocks on a tier
	OpRemove                   // the source dropped blocks from a tier
	OpClear                    // the source dropped everything, or one tier
)

func (k OpKind) String() string {
	switch k {
	case OpStore:
		return "store"
	case OpRemove:
		return "remove"
	case OpClear:
		return "clear"
	}
	return "unknown"
}

// numTiers is the number of kvevents tiers; a holder keeps one bit each.
const numTiers = int(kvevents.TierExternal) + 1

// Op is one change to a source's residency. Ops alias the slices they are
// built from; the index copies nothing it keeps but hash values.
type Op struct {
	Kind OpKind
	Tier kvevents.Tier // Store, Remove, and Clear unless AllTiers

	// Hashes are the source's engine block hashes (Store, Remove).
	Hashes []uint64

	// A Store built from an engine event links under its parent, named by
	// the source's own engine hash, and carries the blocks' local hashes
	// (kvhash.LocalHashes); the index chains them into identities.
	Parent    uint64
	HasParent bool
	Local     []uint64

	// A Store built by Dump carries the identities (rolling sequence
	// hashes) and depths directly, because a source may hold a block
	// without its parent and such a run cannot be named by a parent hash.
	// Set either Local or Seqs, not both.
	Seqs   []uint64
	Depths []uint32

	// BlockSize is the event's block size in tokens; 0 skips the check.
	BlockSize int

	// AllTiers makes a Clear drop every tier.
	AllTiers bool

	// SaltUnknown marks a Store whose blocks' cache salt could not be
	// known (kvevents.Event.SaltUnknown): built from an event, its
	// identities match no request; applied, it makes the source one whose
	// salt is not known (Index.SaltKnown) until it holds nothing. A Dump
	// of such a source carries it on its first op.
	SaltUnknown bool
}

// saltUnknownMark is mixed into the local hashes of blocks whose salt is
// not known, as an extra key no request's tokens reproduce.
const saltUnknownMark = 0x5a17_0000_dead_beef

// OpFromEvent converts a decoded engine event into an index op, computing
// the blocks' local hashes from its token ids (docs/wire.md §4.1): the LoRA name and
// cache salt go into the seed, which is what keeps tenants apart.
func OpFromEvent(ev kvevents.Event) (Op, error) {
	switch ev.Kind {
	case kvevents.KindStored:
		if ev.Placeholder {
			return Op{}, ErrPlaceholder
		}
		if ev.BlockSize <= 0 {
			return Op{}, fmt.Errorf("%w: block_size %d", ErrInvalidOp, ev.BlockSize)
		}
		if len(ev.TokenIDs) != len(ev.BlockHashes)*ev.BlockSize {
			return Op{}, fmt.Errorf("%w: %d token_ids for %d block_hashes of block_size %d",
				ErrInvalidOp, len(ev.TokenIDs), len(ev.BlockHashes), ev.BlockSize)
		}
		local := kvhash.LocalHashes(ev.TokenIDs, ev.BlockSize, kvhash.SeedFor(ev.LoRAName, ev.CacheSalt))
		for i, x := range ev.BlockExtra {
			// The engine hashed more than tokens into this block (an
			// image, prompt embeddings): no request the router hashes
			// from tokens may match it, nor anything under it.
			if x != 0 && i < len(local) {
				local[i] = kvhash.SequenceHash(local[i], x)
			}
		}
		if ev.SaltUnknown {
			// Fail closed: under a salt that may be any tenant's, no
			// request may match these blocks, nor anything under them.
			for i := range local {
				local[i] = kvhash.SequenceHash(local[i], saltUnknownMark)
			}
		}
		return Op{
			Kind:        OpStore,
			Tier:        ev.Tier,
			Hashes:      ev.BlockHashes,
			Parent:      ev.ParentHash,
			HasParent:   ev.HasParent,
			Local:       local,
			BlockSize:   ev.BlockSize,
			SaltUnknown: ev.SaltUnknown,
		}, nil
	case kvevents.KindRemoved:
		return Op{Kind: OpRemove, Tier: ev.Tier, Hashes: ev.BlockHashes}, nil
	case kvevents.KindCleared:
		return Op{Kind: OpClear, AllTiers: true}, nil
	}
	return Op{}, fmt.Errorf("%w: event kind %d", ErrInvalidOp, ev.Kind)
}

// OpError reports which op of an Apply failed; ops before it were applied,
// it and those after were not.
type OpError struct {
	Source Source
	Pos    int
	Kind   OpKind
	Err    error
}

func (e *OpError) Error() string {
	return fmt.Sprintf("index: %s op %d of %s: %v", e.Kind, e.Pos, e.Source, e.Err)
}

func (e *OpError) Unwrap() error { return e.Err }

// check validates an op's shape against the index's block size.
func (o *Op) check(blockSize int) error {
	if int(o.Tier) >= numTiers {
		return fmt.Errorf("%w: tier %d", ErrInvalidOp, o.Tier)
	}
	switch o.Kind {
	case OpStore:
		if o.BlockSize != 0 && o.BlockSize != blockSize {
			return fmt.Errorf("%w: event block_size %d, registered %d", ErrBlockSize, o.BlockSize, blockSize)
		}
		switch {
		case o.Seqs != nil && o.Local != nil:
			return fmt.Errorf("%w: store sets both Local and Seqs", ErrInvalidOp)
		case o.Seqs != nil:
			if len(o.Seqs) != len(o.Hashes) || len(o.Depths) != len(o.Hashes) {
				return fmt.Errorf("%w: %d hashes, %d seqs, %d depths", ErrInvalidOp, len(o.Hashes), len(o.Seqs), len(o.Depths))
			}
			for i, d := range o.Depths {
				if d > maxDepth || o.Seqs[i] == 0 {
					return fmt.Errorf("%w: block %d: identity %#x at depth %d", ErrInvalidOp, i, o.Seqs[i], d)
				}
			}
		default:
			if len(o.Local) != len(o.Hashes) {
				return fmt.Errorf("%w: %d hashes, %d local hashes", ErrInvalidOp, len(o.Hashes), len(o.Local))
			}
		}
	case OpRemove, OpClear:
	default:
		return fmt.Errorf("%w: kind %d", ErrInvalidOp, o.Kind)
	}
	return nil
}
