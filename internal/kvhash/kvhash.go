// Package kvhash computes block identities: the router-side local and
// sequence hashes (Dynamo-compatible XXH3) and emulations of the engine-side
// block hashes of vLLM and SGLang, used by the simulated engine.
package kvhash

import (
	"math/bits"

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

// SequenceHash chains a block's local hash onto its parent's sequence hash:
// XXH3-64 with seed Seed of the 16 bytes parent, local (little-endian).
//
// It is XXH3's 9-to-16-byte path written out for exactly 16 bytes, which
// the compiler inlines: Match hashes every block of every request, and the
// library's general entry point adds a call, a switch on the length and the
// bytes stored and read back (7.0 against 7.6–9.5 ns a hash, `go test
// -bench SequenceHash`). The tests hold it to xxh3.HashSeed on random and
// fuzzed inputs.
func SequenceHash(parent, local uint64) uint64 {
	lo := parent ^ seqFlip1
	hi := local ^ seqFlip2
	h, l := bits.Mul64(lo, hi)
	acc := 16 + bits.ReverseBytes64(lo) + hi + (h ^ l)
	acc ^= acc >> 37
	acc *= 0x165667919e3779f9
	return acc ^ acc>>32
}

// The XXH3 bitflips of the 9-to-16-byte path with seed Seed: words 24..55
// of the XXH3 default secret, folded with the seed.
const (
	seqFlip1 = (0x1f67b3b7a4a44072 ^ 0x78e5c0cc4ee679cb) + Seed
	seqFlip2 = (0x2172ffcc7dd05a82 ^ 0x8e2443f7744608b8) - Seed
)

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
