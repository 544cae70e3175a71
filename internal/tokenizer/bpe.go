// This file holds the byte-pair-encoding model: vocabulary, merges, byte fallback, per-word encoding.

package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"kvrouter/internal/tokenizer/internal/pretok"
)

// modelJSON is the "model" section of a tokenizer.json.
type modelJSON struct {
	Type                    string            `json:"type"`
	Vocab                   map[string]uint32 `json:"vocab"`
	Merges                  []mergeJSON       `json:"merges"`
	UnkToken                *string           `json:"unk_token"`
	ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
	Dropout                 *float64          `json:"dropout"`
	FuseUnk                 bool              `json:"fuse_unk"`
	ByteFallback            bool              `json:"byte_fallback"`
	IgnoreMerges            bool              `json:"ignore_merges"`
}

// mergeJSON is one merge, serialised either as "a b" or as ["a", "b"]. A
// malformed entry is kept in bad so that the loader can name its index.
type mergeJSON struct {
	a, b string
	bad  string
}

func (m *mergeJSON) UnmarshalJSON(data []byte) error {
	// Large vocabularies have hundreds of thousands of merges; most have no
	// escapes, and encoding/json has validated the document before calling
	// here, so their strings can be sliced out directly.
	if bytes.IndexByte(data, '\\') < 0 {
		if q := quoted(data); len(q) == 1 {
			a, b, ok := strings.Cut(q[0], " ")
			if !ok || strings.Contains(b, " ") {
				m.bad = q[0]
				return nil
			}
			m.a, m.b = a, b
			return nil
		} else if len(q) == 2 && data[0] == '[' {
			m.a, m.b = q[0], q[1]
			return nil
		}
	}
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		// tokenizers splits on every space and wants exactly two parts.
		a, b, ok := strings.Cut(s, " ")
		if !ok || strings.Contains(b, " ") {
			m.bad = s
			return nil
		}
		m.a, m.b = a, b
		return nil
	}
	var pair []string
	if err := json.Unmarshal(data, &pair); err != nil || len(pair) != 2 {
		m.bad = string(data)
		return nil
	}
	m.a, m.b = pair[0], pair[1]
	return nil
}

// quoted returns the contents of the double-quoted strings in data, which
// has no escapes.
func quoted(data []byte) []string {
	var out []string
	for {
		i := bytes.IndexByte(data, '"')
		if i < 0 {
			return out
		}
		j := bytes.IndexByte(data[i+1:], '"')
		if j < 0 {
			return nil
		}
		out = append(out, string(data[i+1:i+1+j]))
		data = data[i+2+j:]
	}
}

type mergeRule struct {
	rank uint32 // lower merges first
	id   uint32 // the merged token
}

const noRank = math.MaxUint32

func pairKey(a, b uint32) uint64 { return uint64(a)<<32 | uint64(b) }

// bpe is the byte-pair-encoding model. In byte-level mode (when the
// pre-tokenizer ends with ByteLevel) it works on raw bytes: the byte-level
// alphabet is a bijection, so mapping each byte to its rune and looking the
// rune up is the same as looking the byte up in a table built at load time,
// and encoding skips building the mapped string.
type bpe struct {
	vocab  map[string]uint32 // as written in the file
	tokens map[uint32]string
	merges map[uint64]mergeRule

	unk          uint32
	hasUnk       bool
	fuseUnk      bool
	byteFallback bool
	fallback     [256]uint32 // ids of the "<0xXX>" tokens
	hasFallback  [256]bool
	ignoreMerges bool

	byteLevel bool
	byteIDs   [256]uint32
	hasByteID [256]bool
	// byteLevelFallback[b] is what byte_fallback emits for byte b when its
	// rune is missing from the vocabulary: the "<0xXX>" tokens of the
	// rune's UTF-8, or nil.
	byteLevelFallback [256][]uint32
	// words maps a piece, as encodeWord receives it, to a vocabulary id;
	// only built for ignore_merges.
	words map[string]uint32

	cache *wordCache
	short *shortCache
}

func newBPE(m *modelJSON, byteLevel bool) (*bpe, error) {
	switch m.Type {
	case "BPE":
	case "":
		if m.Merges == nil {
			return nil, invalid("model.type", "missing")
		}
	default:
		return nil, unsupported("model.type", "%q (only \"BPE\" is implemented)", m.Type)
	}
	if m.Vocab == nil {
		return nil, invalid("model.vocab", "missing")
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" {
		return nil, unsupported("model.continuing_subword_prefix", "%q", *m.ContinuingSubwordPrefix)
	}
	if m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return nil, unsupported("model.end_of_word_suffix", "%q", *m.EndOfWordSuffix)
	}
	if m.Dropout != nil && *m.Dropout != 0 {
		return nil, unsupported("model.dropout", "%v (random merges cannot match an engine)", *m.Dropout)
	}
	b := &bpe{
		vocab:        m.Vocab,
		tokens:       make(map[uint32]string, len(m.Vocab)),
		merges:       make(map[uint64]mergeRule, len(m.Merges)),
		fuseUnk:      m.FuseUnk,
		byteFallback: m.ByteFallback,
		ignoreMerges: m.IgnoreMerges,
		byteLevel:    byteLevel,
		cache:        newWordCache(),
		short:        new(shortCache),
	}
	for tok, id := range m.Vocab {
		// Two tokens with one id: keep one deterministically.
		if old, ok := b.tokens[id]; !ok || tok < old {
			b.tokens[id] = tok
		}
	}
	for i, mg := range m.Merges {
		a, okA := m.Vocab[mg.a]
		c, okB := m.Vocab[mg.b]
		id, okAB := m.Vocab[mg.a+mg.b]
		if mg.bad != "" || !okA || !okB || !okAB {
			return nil, badMerge(i, mg, m.Vocab)
		}
		// A repeated pair takes its last rank, as in tokenizers.
		b.merges[pairKey(a, c)] = mergeRule{rank: uint32(i), id: id}
	}
	if m.UnkToken != nil {
		id, ok := m.Vocab[*m.UnkToken]
		if !ok {
			return nil, invalid("model.unk_token", "%q is not in model.vocab", *m.UnkToken)
		}
		b.unk, b.hasUnk = id, true
	}
	if b.byteFallback {
		for i := range 256 {
			b.fallback[i], b.hasFallback[i] = m.Vocab[fmt.Sprintf("<0x%02X>", i)]
		}
	}
	if byteLevel {
		for i := range 256 {
			r := string(pretok.ByteRune(byte(i)))
			b.byteIDs[i], b.hasByteID[i] = m.Vocab[r]
			if !b.hasByteID[i] && b.byteFallback {
				b.byteLevelFallback[i] = b.fallbackIDs(nil, []byte(r))
			}
		}
	}
	if b.ignoreMerges {
		b.words = m.Vocab
		if byteLevel {
			b.words = make(map[string]uint32, len(m.Vocab))
			var raw []byte
			for tok, id := range m.Vocab {
				var ok bool
				if raw, ok = pretok.AppendDecoded(raw[:0], tok); ok {
					b.words[string(raw)] = id
				}
			}
		}
	}
	return b, nil
}

func badMerge(i int, mg mergeJSON, vocab map[string]uint32) error {
	field := fmt.Sprintf("model.merges[%d]", i)
	if mg.bad != "" {
		return invalid(field, "%s is not a pair of tokens", mg.bad)
	}
	for _, tok := range []string{mg.a, mg.b} {
		if _, ok := vocab[tok]; !ok {
			return invalid(field, "token %q is not in model.vocab", tok)
		}
	}
	return invalid(field, "merged token %q is not in model.vocab", mg.a+mg.b)
}

// fallbackIDs appends the "<0xXX>" ids of every byte of char, or returns
// nil when one is missing.
func (b *bpe) fallbackIDs(dst []uint32, char []byte) []uint32 {
	for _, c := range char {
		if !b.hasFallback[c] {
			return nil
		}
		dst = append(dst, b.fallback[c])
	}
	return dst
}

// maxCachedWord bounds the pieces kept in the cache, as tokenizers does:
// long pieces are rare and would crowd out the common ones.
const maxCachedWord = 256

// encodeWord appends the ids of one pre-tokenized piece.
func (b *bpe) encodeWord(dst []uint32, w string, sc *scratch) []uint32 {
	if w == "" {
		return dst
	}
	if b.ignoreMerges {
		if id, ok := b.words[w]; ok {
			return append(dst, id)
		}
	}
	if len(w) <= maxShortWord {
		k := shortKey(w)
		ids, set := b.short.get(k)
		if ids != nil {
			return append(dst, ids...)
		}
		n := len(dst)
		dst = b.encodeUncached(dst, w, sc)
		b.short.put(set, k, slices.Clone(dst[n:]))
		return dst
	}
	if len(w) >= maxCachedWord {
		return b.encodeUncached(dst, w, sc)
	}
	ids, slot := b.cache.get(w)
	if ids != nil {
		return append(dst, ids...)
	}
	n := len(dst)
	dst = b.encodeUncached(dst, w, sc)
	b.cache.put(slot, w, slices.Clone(dst[n:]))
	return dst
}

func (b *bpe) encodeUncached(dst []uint32, w string, sc *scratch) []uint32 {
	syms := b.merge(b.symbols(sc.syms[:0], w), sc)
	sc.syms = syms[:0]
	return append(dst, syms...)
}

// symbols appends the initial symbols of w: one per character (per byte in
// byte-level mode), with byte fallback and unknown tokens as in tokenizers.
func (b *bpe) symbols(dst []uint32, w string) []uint32 {
	pendingUnk := false
	for i := 0; i < len(w); {
		var (
			id uint32
			ok bool
			n  = 1
		)
		if b.byteLevel {
			id, ok = b.byteIDs[w[i]], b.hasByteID[w[i]]
		} else {
			_, n = utf8.DecodeRuneInString(w[i:])
			id, ok = b.vocab[w[i:i+n]]
		}
		char := w[i : i+n]
		i += n
		if ok {
			if pendingUnk {
				dst = append(dst, b.unk)
				pendingUnk = false
			}
			dst = append(dst, id)
			continue
		}
		if b.byteFallback {
			// tokenizers emits the fallback bytes at once but holds a
			// pending unknown token until the next known character, so an
			// unknown followed by fallback bytes comes out after them.
			var fb []uint32
			if b.byteLevel {
				fb = b.byteLevelFallback[char[0]]
			} else {
				fb = b.fallbackIDs(nil, []byte(char))
			}
			if fb != nil {
				dst = append(dst, fb...)
				continue
			}
		}
		if b.hasUnk {
			if pendingUnk && !b.fuseUnk {
				dst = append(dst, b.unk)
			}
			pendingUnk = true
		}
		// Without an unknown token the character is dropped, as in
		// tokenizers.
	}
	if pendingUnk {
		dst = append(dst, b.unk)
	}
	return dst
}
