// This file holds a request's block keys: the flavour's event hashes and the content seeds.

package mocker

import (
	"crypto/sha256"

	"kvrouter/internal/kvhash"
)

// engineHashes returns the engine's event hashes of tokens' full blocks:
// SGLang's page hash chain (salted at the root, and under an adapter from
// sglangLoRAPrior), or vLLM's sha256_cbor chain with the LoRA adapter's
// name as every block's first extra key and the cache salt as the first
// block's last, as vLLM does.
func (c *Config) engineHashes(tokens []uint32, salt, lora string) []uint64 {
	if c.Flavor == SGLang {
		if lora != "" {
			return sglangPages(tokens, c.BlockSize, sglangLoRAPrior(lora, salt))
		}
		return kvhash.SGLangPageHashes(tokens, c.BlockSize, salt)
	}
	n := len(tokens) / c.BlockSize
	out := make([]uint64, n)
	parent := kvhash.VLLMNoneHash(c.vllmSeed())
	for i := range n {
		var extra []string
		if lora != "" {
			extra = append(extra, lora)
		}
		if i == 0 && salt != "" {
			extra = append(extra, salt)
		}
		parent = kvhash.VLLMBlockDigest(parent, tokens[i*c.BlockSize:(i+1)*c.BlockSize], extra)
		out[i] = kvhash.VLLMEventHash(parent)
	}
	return out
}

// sglangLoRAPrior is the simulated SGLang's root prior for a page under a
// LoRA adapter: SHA-256 of "sglang-lora-v1\x00", the adapter's name, and
// the salt prior when salted. SGLang keeps an adapter's pages apart in its
// radix tree; how it hashes them is the simulation's choice, opaque to the
// router, which identifies blocks by tokens and lora_name.
func sglangLoRAPrior(lora, salt string) *kvhash.Digest {
	b := append([]byte("sglang-lora-v1\x00"), lora...)
	if p := kvhash.SGLangSaltPrior(salt); p != nil {
		b = append(append(b, 0), p[:]...)
	}
	d := kvhash.Digest(sha256.Sum256(b))
	return &d
}

// sglangPages is kvhash.SGLangPageHashes from a given root prior.
func sglangPages(tokens []uint32, pageSize int, prior *kvhash.Digest) []uint64 {
	out := make([]uint64, 0, len(tokens)/pageSize)
	for ; len(tokens) >= pageSize; tokens = tokens[pageSize:] {
		d := kvhash.SGLangPageDigest(prior, tokens[:pageSize])
		out = append(out, kvhash.SGLangEventHash(d))
		prior = &d
	}
	return out
}

// contentSeeds returns, per full block, the rolling hash of its token
// prefix that seeds its KV bytes, under the LoRA adapter if any (an
// adapter changes the keys and values attention computes). It ignores the
// cache salt: a salt isolates tenants in the cache, it does not change
// what attention computes.
func contentSeeds(tokens []uint32, blockSize int, lora string) []uint64 {
	return kvhash.SequenceHashes(kvhash.LocalHashes(tokens, blockSize, kvhash.SeedFor(lora, "")))
}
