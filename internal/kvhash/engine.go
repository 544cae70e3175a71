// This file holds the engines' own block hashes: vLLM's sha256_cbor chain and SGLang's page digests.

package kvhash

import (
	"crypto/sha256"
	"encoding/binary"
)

// Digest is a full engine-side block hash. Engines publish only 64 bits of
// it in events (VLLMEventHash, SGLangEventHash) but chain on all 32 bytes,
// so a simulated engine must keep the digest to hash the next block.
type Digest [32]byte

// VLLMDefaultSeed is the seed vLLM hashes into NONE_HASH when PYTHONHASHSEED
// is unset.
const VLLMDefaultSeed = "vllm-none-hash"

// sglangSaltPrefix domain-separates the salt prior from page digests.
const sglangSaltPrefix = "sglang-cache-salt-v1\x00"

// VLLMNoneHash returns the parent digest of a request's first block under
// sha256_cbor: SHA-256 of the CBOR text string seed.
func VLLMNoneHash(seed string) Digest {
	buf := appendCBORHead(make([]byte, 0, 9+len(seed)), cborText, uint64(len(seed)))
	return sha256.Sum256(append(buf, seed...))
}

// VLLMBlockDigest hashes one full block the way vLLM's sha256_cbor does:
// SHA-256 of canonical CBOR [bstr parent, [tokens...], nil | [extra...]].
// Extra keys are the strings vLLM mixes in (LoRA name, and on the first
// block the cache salt); nil or empty encodes as CBOR null, as vLLM passes
// None when a block has none.
func VLLMBlockDigest(parent Digest, tokens []uint32, extra []string) Digest {
	var stack [512]byte
	return vllmDigest(stack[:0], parent, tokens, extra)
}

func vllmDigest(buf []byte, parent Digest, tokens []uint32, extra []string) Digest {
	return sha256.Sum256(appendVLLMBlockCBOR(buf, parent, tokens, extra))
}

func appendVLLMBlockCBOR(buf []byte, parent Digest, tokens []uint32, extra []string) []byte {
	buf = append(buf, cborArray|3)
	buf = appendCBORHead(buf, cborBytes, uint64(len(parent)))
	buf = append(buf, parent[:]...)
	buf = appendCBORHead(buf, cborArray, uint64(len(tokens)))
	for _, t := range tokens {
		buf = appendCBORHead(buf, cborUint, uint64(t))
	}
	if len(extra) == 0 {
		buf = append(buf, cborNull)
	} else {
		buf = appendCBORHead(buf, cborArray, uint64(len(extra)))
		for _, s := range extra {
			buf = appendCBORHead(buf, cborText, uint64(len(s)))
			buf = append(buf, s...)
		}
	}
	return buf
}

// VLLMEventHash is the integer vLLM publishes for a digest: its last 8
// bytes, big-endian.
func VLLMEventHash(d Digest) uint64 {
	return binary.BigEndian.Uint64(d[24:])
}

// VLLMBlockHashes returns the event hashes of tokens' full blocks, chained
// from NONE_HASH of seed, without extra keys. A partial tail is dropped, as
// vLLM only hashes full blocks.
func VLLMBlockHashes(tokens []uint32, blockSize int, seed string) []uint64 {
	if blockSize <= 0 {
		return nil
	}
	out := make([]uint64, 0, len(tokens)/blockSize)
	buf := make([]byte, 0, 64+9*blockSize)
	parent := VLLMNoneHash(seed)
	for ; len(tokens) >= blockSize; tokens = tokens[blockSize:] {
		parent = vllmDigest(buf, parent, tokens[:blockSize], nil)
		out = append(out, VLLMEventHash(parent))
	}
	return out
}

// SGLangSaltPrior returns the prior digest of a salted request's first page,
// or nil when salt is empty: SGLang treats an empty salt as no salt.
func SGLangSaltPrior(salt string) *Digest {
	if salt == "" {
		return nil
	}
	d := Digest(sha256.Sum256([]byte(sglangSaltPrefix + salt)))
	return &d
}

// SGLangPageDigest hashes one page: SHA-256 of the prior page's digest (none
// at an unsalted root) followed by the tokens as little-endian u32.
func SGLangPageDigest(prior *Digest, tokens []uint32) Digest {
	var stack [32 + 4*64]byte
	return sglangDigest(stack[:0], prior, tokens)
}

func sglangDigest(buf []byte, prior *Digest, tokens []uint32) Digest {
	if prior != nil {
		buf = append(buf, prior[:]...)
	}
	for _, t := range tokens {
		buf = binary.LittleEndian.AppendUint32(buf, t)
	}
	return sha256.Sum256(buf)
}

// SGLangEventHash is the integer SGLang publishes for a digest: its first 16
// hex digits read as a signed int64, returned here as the same 64 bits.
func SGLangEventHash(d Digest) uint64 {
	return binary.BigEndian.Uint64(d[:8])
}

// SGLangPageHashes returns the event hashes of tokens' full pages, chained
// from the salt prior (see SGLangSaltPrior). A partial tail is dropped.
func SGLangPageHashes(tokens []uint32, pageSize int, salt string) []uint64 {
	if pageSize <= 0 {
		return nil
	}
	out := make([]uint64, 0, len(tokens)/pageSize)
	buf := make([]byte, 0, 32+4*pageSize)
	prior := SGLangSaltPrior(salt)
	var d Digest
	for ; len(tokens) >= pageSize; tokens = tokens[pageSize:] {
		d = sglangDigest(buf, prior, tokens[:pageSize])
		out = append(out, SGLangEventHash(d))
		prior = &d
	}
	return out
}

// CBOR major types, already shifted into the initial byte's top 3 bits.
const (
	cborUint  = 0 << 5
	cborBytes = 2 << 5
	cborText  = 3 << 5
	cborArray = 4 << 5
	cborNull  = 0xf6
)

// appendCBORHead writes a canonical (shortest-form) CBOR head, which is what
// cbor2's canonical mode produces and so what the digest depends on.
func appendCBORHead(b []byte, major byte, n uint64) []byte {
	switch {
	case n < 24:
		return append(b, major|byte(n))
	case n <= 0xff:
		return append(b, major|24, byte(n))
	case n <= 0xffff:
		return binary.BigEndian.AppendUint16(append(b, major|25), uint16(n))
	case n <= 0xffffffff:
		return binary.BigEndian.AppendUint32(append(b, major|26), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(b, major|27), n)
}
