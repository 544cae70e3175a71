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
func fillBlock(dst []byte, modelSeed, prefix uint64) {
	var in [16]byte
	binary.LittleEndian.PutUint64(in[:8], modelSeed)
	binary.LittleEndian.PutUint64(in[8:], prefix)
	h := xxh3.Hash128Seed(in[:], modelSeed)
	var key [32]byte
	binary.LittleEndian.PutUint64(key[0:], h.Lo)
	binary.LittleEndian.PutUint64(key[8:], h.Hi)
	binary.LittleEndian.PutUint64(key[16:], prefix)
	binary.LittleEndian.PutUint64(key[24:], modelSeed)
	c := rand.NewChaCha8(key)
	_, _ = c.Read(dst) // ChaCha8.Read never fails
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
