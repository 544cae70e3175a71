// This file holds GPT-2's byte-level alphabet: a printable rune for every byte, both ways.

package pretok

import "unicode/utf8"

// GPT-2's byte-level alphabet gives every byte a printable rune so that
// vocabularies can be stored as text: bytes that are already printable
// Latin-1 keep their code point, the other 68 are moved, in byte order, to
// U+0100 onwards. The space becomes U+0120 'Ġ', the newline U+010A 'Ċ'.
var (
	byteRunes [256]rune
	runeBytes [256 + 68]int16 // -1 where the rune is not in the alphabet
)

func init() {
	for i := range runeBytes {
		runeBytes[i] = -1
	}
	moved := rune(0)
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !('!' <= r && r <= '~' || '¡' <= r && r <= '¬' || '®' <= r && r <= 'ÿ') {
			r = 256 + moved
			moved++
		}
		byteRunes[b] = r
		runeBytes[r] = int16(b)
	}
}

// ByteRune returns the rune of the byte-level alphabet that stands for b.
func ByteRune(b byte) rune { return byteRunes[b] }

// RuneByte returns the byte that r stands for in the byte-level alphabet.
func RuneByte(r rune) (byte, bool) {
	if r < 0 || int(r) >= len(runeBytes) || runeBytes[r] < 0 {
		return 0, false
	}
	return byte(runeBytes[r]), true
}

// AppendEncoded appends to dst the byte-level form of s: each byte
// replaced by the UTF-8 of its rune.
func AppendEncoded(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		dst = utf8.AppendRune(dst, byteRunes[s[i]])
	}
	return dst
}

// AppendDecoded appends to dst the bytes that the byte-level text s stands
// for. It reports false, leaving dst unchanged, when s has a rune outside
// the alphabet.
func AppendDecoded(dst []byte, s string) ([]byte, bool) {
	n := len(dst)
	for _, r := range s {
		b, ok := RuneByte(r)
		if !ok {
			return dst[:n], false
		}
		dst = append(dst, b)
	}
	return dst, true
}
