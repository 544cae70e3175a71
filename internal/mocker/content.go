// This file holds the simulated model: KV block bytes, and output tokens chosen by what it sees.

package mocker

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"strings"
	"unicode"

	"github.com/zeebo/xxh3"

	"kvrouter/internal/tokenizer"
)

// fillBlock writes a block's simulated KV bytes: a stream keyed by the model
// seed and the rolling hash of the block's whole token prefix, so that equal
// prefixes give equal bytes on every instance with the same model seed, and
// any other model seed or prefix gives other bytes.
//
// The stream is a counter hashed word by word (SplitMix64's finalizer over
// a Weyl sequence), not a cipher: the bytes only need to be deterministic
// and to differ wherever a wrong block, offset or seed would be restored.
// The engine fills every block it computes, 1 MiB at the benchmarks' size,
// in real CPU time on cores the router and the other engines share;
// ChaCha8 took 1.3 ms a MiB on the development VM, over a quarter of the
// 4.8 ms a 64-token block's prefill is simulated to take.
func fillBlock(dst []byte, modelSeed, prefix uint64) {
	var in [16]byte
	binary.LittleEndian.PutUint64(in[:8], modelSeed)
	binary.LittleEndian.PutUint64(in[8:], prefix)
	h := xxh3.Hash128Seed(in[:], modelSeed)
	x, step := h.Lo, h.Hi|1
	for len(dst) >= 32 {
		_ = dst[31]
		// Four independent words a round keep the multipliers busy.
		binary.LittleEndian.PutUint64(dst[0:], mix64(x+step))
		binary.LittleEndian.PutUint64(dst[8:], mix64(x+2*step))
		binary.LittleEndian.PutUint64(dst[16:], mix64(x+3*step))
		binary.LittleEndian.PutUint64(dst[24:], mix64(x+4*step))
		x += 4 * step
		dst = dst[32:]
	}
	for len(dst) > 0 {
		x += step
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], mix64(x))
		dst = dst[copy(dst, w[:]):]
	}
}

// mix64 is SplitMix64's output function.
func mix64(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// digest summarises what the model "sees" for a prompt: the KV bytes of its
// full blocks as held in the GPU pool, then the tail tokens it has no block
// for. Output is generated from it, so a block restored with other bytes
// than a recompute would give changes the output.
type digest struct{ h *xxh3.Hasher }

func newDigest() digest { return digest{h: xxh3.New()} }

func (d digest) block(b []byte) { _, _ = d.h.Write(b) }

func (d digest) tail(tokens []uint32) {
	var buf [4]byte
	for _, t := range tokens {
		binary.LittleEndian.PutUint32(buf[:], t)
		_, _ = d.h.Write(buf[:])
	}
}

func (d digest) sum() uint64 { return d.h.Sum64() }

// vocab is the set of token ids the simulated model emits: tokens that
// decode on their own to a word or punctuation, so that decoding tokens one
// by one (streaming) gives the same text as decoding them together, and no
// special token ends up in the output.
type vocab struct {
	ids  []uint32
	text []string // text[i] is the decoded form of ids[i]
}

func newVocab(tk *tokenizer.Tokenizer) *vocab {
	v := &vocab{}
	for id := range uint32(tk.VocabSize()) {
		s := tk.Decode([]uint32{id})
		if !wordLike(s) {
			continue
		}
		v.ids = append(v.ids, id)
		v.text = append(v.text, s)
	}
	return v
}

// wordLike accepts " word", "word", "." and ",".
func wordLike(s string) bool {
	if s == "." || s == "," {
		return true
	}
	w := strings.TrimPrefix(s, " ")
	if w == "" {
		return false
	}
	for _, r := range w {
		if r > unicode.MaxASCII || !unicode.IsLetter(r) {
			return false
		}
	}
	return true
}

// generate returns n output tokens determined by seed.
func (v *vocab) generate(seed uint64, n int) []uint32 {
	if len(v.ids) == 0 {
		return make([]uint32, n)
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	out := make([]uint32, n)
	for i := range out {
		out[i] = v.ids[rng.IntN(len(v.ids))]
	}
	return out
}

// textOf returns the text of one generated token.
func (v *vocab) textOf(id uint32) string {
	if i, ok := slices.BinarySearch(v.ids, id); ok {
		return v.text[i]
	}
	return ""
}
