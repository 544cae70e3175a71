// This file holds a request's block keys: the flavour's event hashes and the content seeds.

package mocker

import (
	"kvrouter/internal/kvhash"
)

// engineHashes returns the engine's event hashes of tokens' full blocks:
// SGLang's page hash chain (salted at the root), or vLLM's sha256_cbor
// chain with the cache salt as the first block's extra key, as vLLM does.
func (c *Config) engineHashes(tokens []uint32, salt string) []uint64 {
	if c.Flavor == SGLang {
		return kvhash.SGLangPageHashes(tokens, c.BlockSize, salt)
	}
	n := len(tokens) / c.BlockSize
	out := make([]uint64, n)
	parent := kvhash.VLLMNoneHash(c.vllmSeed())
	for i := range n {
		var extra []string
		if i == 0 && salt != "" {
			extra = []string{salt}
		}
		parent = kvhash.VLLMBlockDigest(parent, tokens[i*c.BlockSize:(i+1)*c.BlockSize], extra)
		out[i] = kvhash.VLLMEventHash(parent)
	}
	return out
}

// contentSeeds returns, per full block, the rolling hash of its token
// prefix that seeds its KV bytes. It ignores the cache salt: a salt isolates
// tenants in the cache, it does not change what attention computes.
func contentSeeds(tokens []uint32, blockSize int) []uint64 {
	return kvhash.SequenceHashes(kvhash.LocalHashes(tokens, blockSize, kvhash.Seed))
}
