// This file holds Valid and ValidValue: json.Valid's rules, eight bytes at a time in strings.

package rawjson

import "encoding/binary"

// maxDepth is encoding/json's nesting limit, which valid keeps.
const maxDepth = 10000

// Valid reports whether b is exactly one JSON value, as json.Valid does:
// the same grammar (strings are not checked for valid UTF-8 there either)
// and the same nesting limit. Every request body is validated, and
// json.Valid's general-purpose scanner, a function call per byte, took a
// tenth of the router's CPU; this one runs tight loops over strings and
// numbers.
func Valid(b []byte) bool {
	i := ValidValue(b, SkipSpace(b, 0))
	return i >= 0 && SkipSpace(b, i) == len(b)
}

// ValidValue returns the offset just past the JSON value starting at b[i],
// or -1 when there is no valid value there.
func ValidValue(b []byte, i int) int {
	var buf [64]byte
	stack := buf[:0] // the open containers: '{' or '['
	for {
		// A value starts at i.
		if i >= len(b) {
			return -1
		}
		switch c := b[i]; {
		case c == '{' || c == '[':
			if len(stack) >= maxDepth {
				return -1
			}
			stack = append(stack, c)
			if i = SkipSpace(b, i+1); i < len(b) && b[i] == c+2 { // '}' or ']'
				stack = stack[:len(stack)-1]
				i++
				break
			}
			if c == '{' {
				if i = scanKey(b, i); i < 0 {
					return -1
				}
			}
			continue
		case c == '"':
			i = scanString(b, i)
		case c == '-' || c-'0' <= 9:
			i = scanNumber(b, i)
		case c == 't':
			i = literal(b, i, "true")
		case c == 'f':
			i = literal(b, i, "false")
		case c == 'n':
			i = literal(b, i, "null")
		default:
			return -1
		}
		if i < 0 {
			return -1
		}
		// After a value: a comma and the next, or closing brackets.
		for {
			if len(stack) == 0 {
				return i
			}
			if i = SkipSpace(b, i); i >= len(b) {
				return -1
			}
			top := stack[len(stack)-1]
			if b[i] == top+2 {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			if b[i] != ',' {
				return -1
			}
			if top == '[' {
				// Token ids, most of a long body: plain integers followed
				// by a comma are taken in a tight loop.
				for i+1 < len(b) && b[i+1]-'1' <= 8 {
					j := digits(b, i+2)
					if j >= len(b) || b[j] != ',' {
						break
					}
					i = j
				}
			}
			i = SkipSpace(b, i+1)
			if top == '{' {
				if i = scanKey(b, i); i < 0 {
					return -1
				}
			}
			break
		}
	}
}

// scanKey scans an object member's key and colon at i and returns where its
// value starts, or -1.
func scanKey(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	if i = scanString(b, i); i < 0 {
		return -1
	}
	if i = SkipSpace(b, i); i >= len(b) || b[i] != ':' {
		return -1
	}
	return SkipSpace(b, i+1)
}

// scanString returns the offset just past the string opening at b[i], or
// -1 when it is not a valid JSON string.
func scanString(b []byte, i int) int {
	i++
	for {
		// Eight bytes at a time while none needs a look: no quote, no
		// backslash, no control character.
		for i+8 <= len(b) && !special8(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		if i >= len(b) {
			return -1
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			if i+1 >= len(b) {
				return -1
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return -1
				}
				for _, h := range b[i+2 : i+6] {
					if !isHex(h) {
						return -1
					}
				}
				i += 6
			default:
				return -1
			}
		case c < 0x20:
			return -1
		default:
			i++
		}
	}
}

const (
	lows  = 0x0101010101010101
	highs = 0x8080808080808080
)

// special8 reports whether any of the eight bytes in w is a quote, a
// backslash or below 0x20 (exact, not a heuristic: the borrow of the
// subtraction only starts at a byte that matches).
func special8(w uint64) bool {
	return (hasZero(w^(lows*'"'))|hasZero(w^(lows*'\\'))|((w-lows*0x20)&^w))&highs != 0
}

func hasZero(w uint64) uint64 { return (w - lows) &^ w & highs }

func isHex(c byte) bool { return c-'0' <= 9 || (c|0x20)-'a' <= 5 }

// scanNumber returns the offset just past the number at b[i], or -1. What
// follows is the caller's to check.
func scanNumber(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	if i >= len(b) || b[i]-'0' > 9 {
		return -1
	}
	if b[i] == '0' {
		i++
	} else {
		i = digits(b, i)
	}
	if i < len(b) && b[i] == '.' {
		if j := digits(b, i+1); j > i+1 {
			i = j
		} else {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i]-'0' <= 9 {
		i++
	}
	return i
}

func literal(b []byte, i int, word string) int {
	if len(b)-i < len(word) || string(b[i:i+len(word)]) != word {
		return -1
	}
	return i + len(word)
}
