// Package kvhash computes block identities: the router-side local and
// sequence hashes (Dynamo-compatible XXH3) and emulations of the engine-side
// block hashes of vLLM and SGLang, used by the simulated engine.
package kvhash

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"
)

// Seed is the base seed of router-side block hashes.
const Seed uint64 = 1337

// SeedFor returns the seed for blocks under a LoRA adapter and a cache salt.
// Mixing both into the seed is what isolates tenants: a block stored under
// salt A can never hash equal to a request under salt B. Empty strings are
// absent.
func SeedFor(loraName, cacheSalt string) uint64 {
	s := Seed
	if loraName != "" {
		s += xxh3.HashStringSeed(loraName, 0)
	}
	if cacheSalt != "" {
		s += xxh3.HashStringSeed(cacheSalt, 1)
	}
	return s
}

// LocalHashes hashes each full block of tokens; a partial tail is dropped.
func LocalHashes(tokens []uint32, blockSize int, seed uint64) []uint64 {
	if blockSize <= 0 {
		return nil
	}
	return AppendLocalHashes(make([]uint64, 0, len(tokens)/blockSize), tokens, blockSize, seed)
}

// AppendLocalHashes appends the local hashes of tokens' full blocks to dst.
func AppendLocalHashes(dst []uint64, tokens []uint32, blockSize int, seed uint64) []uint64 {
	if blockSize <= 0 {
		return dst
	}
	var buf []byte
	if !littleEndian {
		buf = make([]byte, blockSize*4)
	}
	for n := len(tokens) / blockSize; n > 0; n-- {
		dst = append(dst, xxh3.HashSeed(tokenBytes(tokens[:blockSize], buf), seed))
		tokens = tokens[blockSize:]
	}
	return dst
}

// SequenceHash chains a block's local hash onto its parent's sequence hash.
func SequenceHash(parent, local uint64) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], parent)
	binary.LittleEndian.PutUint64(b[8:], local)
	return xxh3.HashSeed(b[:], Seed)
}

// SequenceHashes turns local hashes into rolling sequence hashes: the first
// equals its local hash, each next one commits to the whole prefix.
func SequenceHashes(local []uint64) []uint64 {
	out := make([]uint64, len(local))
	for i, h := range local {
		if i == 0 {
			out[i] = h
			continue
		}
		out[i] = SequenceHash(out[i-1], h)
	}
	return out
}
