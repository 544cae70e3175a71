// This file holds MaxBytesPerToken: how much text one token can stand for, to refuse a prompt before encoding it.

package tokenizer

import "unicode/utf8"

// MaxBytesPerToken is an upper bound on the bytes of input text one token
// can stand for, or 0 when the tokenizer's pipeline gives none. A text of n
// bytes then encodes to at least n / MaxBytesPerToken tokens: a caller can
// refuse a text that surely exceeds a context without spending the memory
// and time of encoding it.
//
// The bound is the longest token (in input bytes: a byte-level token's
// runes, a vocabulary entry's bytes otherwise, since "▁" and "<0x0A>" are
// longer than the text they stand for) times what normalization can shrink
// text by. There is none when a step can drop text of any length: a Strip
// or a Replace by nothing or by a regular expression, a Split that removes
// its matches, an added token that swallows the whitespace around it, a
// fused unknown token, or characters with neither a token nor a fallback.
func (t *Tokenizer) MaxBytesPerToken() int { return t.maxBytesPerToken }

// bytesPerToken computes MaxBytesPerToken once the tokenizer is loaded.
func (t *Tokenizer) bytesPerToken() int {
	shrink, ok := shrinkFactor(t.normalizer)
	if !ok {
		return 0
	}
	for _, s := range t.pre {
		if sp, isSplit := s.(splitStep); isSplit && sp.behavior == removed {
			return 0
		}
	}
	b := t.model
	if !b.coversEveryCharacter() {
		return 0
	}
	longest := 4 // an unknown character, or one byte per fallback token
	for _, tok := range b.tokens {
		n := len(tok)
		if b.byteLevel {
			n = utf8.RuneCountInString(tok)
		}
		longest = max(longest, n)
	}
	for _, a := range t.added.byID {
		if a.lstrip || a.rstrip {
			return 0
		}
		longest = max(longest, len(a.content))
	}
	return longest * shrink
}

// coversEveryCharacter reports whether every character of any text comes
// out as at least one token: none is dropped, and unknown ones are not
// fused into one.
func (b *bpe) coversEveryCharacter() bool {
	if b.byteLevel {
		for c := range 256 {
			if !b.hasByteID[c] && (!b.byteFallback || b.byteLevelFallback[c] == nil) {
				return false
			}
		}
		return true
	}
	if b.hasUnk && !b.fuseUnk {
		return true
	}
	if !b.byteFallback {
		return false
	}
	for c := range 256 {
		if !b.hasFallback[c] {
			return false
		}
	}
	return true
}

// shrinkFactor bounds how many times shorter, in bytes, normalization can
// make a text; ok is false when it can drop text of any length.
func shrinkFactor(n normalizer) (factor int, ok bool) {
	switch n := n.(type) {
	case nil, prepend:
		return 1, true
	case unicodeForm:
		// A compatibility character of four bytes can become one ASCII
		// letter (U+1D400 to "A" under NFKC); canonical forms shrink less.
		return 4, true
	case lowercase:
		// The Kelvin sign (three bytes) lowercases to "k".
		return 3, true
	case replace:
		if n.new == "" {
			return 0, false
		}
		return max(1, (len(n.old)+len(n.new)-1)/len(n.new)), true
	case sequence:
		f := 1
		for _, m := range n {
			g, ok := shrinkFactor(m)
			if !ok {
				return 0, false
			}
			f *= g
		}
		return f, true
	}
	// strip, replaceRegex, and anything added later until it is studied.
	return 0, false
}
