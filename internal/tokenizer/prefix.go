// This file holds the prefix cache: the ids of text already seen, by
// chunk, so that a prompt sharing a long prefix with an earlier one (a
// system prompt, the previous turns of a conversation, a rendered chat
// template) is tokenized only past what they share.
package tokenizer

import (
	"math/bits"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/zeebo/xxh3"
)

// A text is cut into chunks at content-defined positions (the same prefix
// is cut at the same places whatever follows it), and each chunk's ids are
// cached under a 128-bit hash of the whole text up to its end. Encoding
// chunk by chunk gives the ids of the whole text only where a cut cannot
// change them, which holds under these conditions, checked at load
// (prefixSafe) and at each cut (nextCut):
//
//   - The cut is between an ASCII letter and a space. With one of the known
//     pre-tokenizer expressions alone (Tokenizer.pattern), no piece holds
//     both: a letter run stops at a space, whitespace runs and punctuation
//     take no letter, and nothing looks behind. The piece ending at the
//     letter ends there whether or not the space follows (no expression's
//     alternative that can end at a letter reads past it, the
//     `\s+(?!\S)` lookahead being on whitespace runs only), and from the
//     space on the expression matches the same pieces it would after the
//     letter.
//   - The normalizer, if any, is a Unicode normalization form: a space
//     after an ASCII letter composes with neither, so each side normalizes
//     alone to what it is in the whole.
//   - No added token holds a space (a match cannot straddle the cut),
//     single_word (its boundary test would look across it), or rstrip
//     after a final ASCII letter (it would swallow the space).
//
// Tests hold chunked encoding to whole encoding on real tokenizers.
type prefixCache struct {
	once sync.Once
	sets *[prefixSets]prefixSet // allocated at first use
}

const (
	prefixBits = 15
	prefixSets = 1 << prefixBits
	// minChunk is the fewest bytes between cuts; cuts then fall about one
	// in cutEvery word ends further on.
	minChunk = 64
	cutEvery = 32
	// minChunked is the shortest text worth cutting.
	minChunked = 4 * minChunk
)

type prefixSet [2]atomic.Pointer[prefixEntry]

type prefixEntry struct {
	k0, k1 uint64
	ids    []uint32 // the chunk's ids; shared: never modified
}

func (c *prefixCache) table() *[prefixSets]prefixSet {
	c.once.Do(func() { c.sets = new([prefixSets]prefixSet) })
	return c.sets
}

func (s *prefixSet) get(k0, k1 uint64) []uint32 {
	if e := s[0].Load(); e != nil && e.k0 == k0 && e.k1 == k1 {
		return e.ids
	}
	if e := s[1].Load(); e != nil && e.k0 == k0 && e.k1 == k1 {
		// Used again: first in its set, so that the chunks every prompt
		// shares (a system prompt) outlive those seen once.
		s[1].Store(s[0].Load())
		s[0].Store(e)
		return e.ids
	}
	return nil
}

func (s *prefixSet) put(k0, k1 uint64, ids []uint32) {
	s[1].Store(s[0].Load())
	s[0].Store(&prefixEntry{k0: k0, k1: k1, ids: ids})
}

// prefixSafe reports whether t's pipeline allows cutting as above.
func prefixSafe(t *Tokenizer) bool {
	if t.pattern == nil || !inertNormalizer(t.normalizer) {
		return false
	}
	for _, a := range t.added.byID {
		if strings.Contains(a.content, " ") || a.singleWord || a.rstrip && isASCIILetter(a.content[len(a.content)-1]) {
			return false
		}
	}
	return true
}

func inertNormalizer(n normalizer) bool {
	switch n := n.(type) {
	case nil, unicodeForm:
		return true
	case sequence:
		for _, m := range n {
			if !inertNormalizer(m) {
				return false
			}
		}
		return true
	}
	return false
}

func isASCIILetter(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' }

// nextCut returns the first cut of text after from: a space after an ASCII
// letter, at least minChunk bytes on, where a hash of the three bytes
// before it picks one word end in cutEvery; -1 when there is none. It
// reads nothing past the cut, so that a prefix is cut alike whatever
// follows.
func nextCut(text string, from int) int {
	i := from + minChunk
	// Eight bytes at a time to the next space: most bytes are not one.
	for ; i+8 <= len(text); i += 8 {
		w := uint64(text[i]) | uint64(text[i+1])<<8 | uint64(text[i+2])<<16 | uint64(text[i+3])<<24 |
			uint64(text[i+4])<<32 | uint64(text[i+5])<<40 | uint64(text[i+6])<<48 | uint64(text[i+7])<<56
		x := w ^ 0x2020202020202020 // a space becomes a zero byte
		spaces := (x - 0x0101010101010101) &^ x & 0x8080808080808080
		for spaces != 0 {
			// The lowest flag is exact (a borrow only spoils the bytes
			// above a zero byte); a false one above is rechecked.
			k := i + bits.TrailingZeros64(spaces)>>3
			if isCut(text, k) {
				return k
			}
			spaces &= spaces - 1
		}
	}
	for ; i < len(text); i++ {
		if isCut(text, i) {
			return i
		}
	}
	return -1
}

// isCut says whether the space-or-not at text[i], i >= 3, is a cut.
func isCut(text string, i int) bool {
	if text[i] != ' ' || !isASCIILetter(text[i-1]) {
		return false
	}
	h := (uint32(text[i-1]) | uint32(text[i-2])<<8 | uint32(text[i-3])<<16) * 0x9e3779b1
	return h>>27 == 0 // one in cutEvery
}

// Seeds of the two halves of the prefix hash.
const (
	prefixSeed0 = 0x243f6a8885a308d3
	prefixSeed1 = 0x13198a2e03707344
)

// hashChunk chains a chunk onto the hash of the text before it. A
// collision would give a prompt another's ids, which only misroutes it:
// the engine tokenizes for itself.
func hashChunk(chunk string, k0, k1 uint64) (uint64, uint64) {
	h := xxh3.HashString128Seed(chunk, k0^k1)
	return h.Lo, h.Hi
}

// encodeChunked is encodeRaw through the prefix cache: the ids of the
// longest run of cached chunks from the start, then the rest encoded, its
// chunks cached for the next text that shares them.
func (t *Tokenizer) encodeChunked(dst []uint32, text string, sc *scratch) []uint32 {
	sets := t.prefix.table()
	k0, k1 := uint64(prefixSeed0), uint64(prefixSeed1)
	hit, pos := true, 0
	for {
		p := nextCut(text, pos)
		if p < 0 {
			break
		}
		chunk := text[pos:p]
		k0, k1 = hashChunk(chunk, k0, k1)
		set := &sets[k0>>(64-prefixBits)]
		pos = p
		if hit {
			if ids := set.get(k0, k1); ids != nil {
				dst = append(dst, ids...)
				continue
			}
			hit = false
		}
		n := len(dst)
		dst = t.encodeRaw(dst, chunk, sc)
		set.put(k0, k1, slices.Clone(dst[n:]))
	}
	return t.encodeRaw(dst, text[pos:], sc)
}

// WithoutPrefixCache returns t encoding every text whole, for measuring
// and for tests.
func (t *Tokenizer) WithoutPrefixCache() *Tokenizer {
	c := *t
	c.prefix = nil
	return &c
}
