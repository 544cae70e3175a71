// This file holds Split and Replace's regexes: Oniguruma syntax in Go's, one lookahead by hand.

package tokenizer

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"
	"unicode"
	"unicode/utf8"
)

// splitRegex finds the matches of a tokenizer.json regular expression.
// Go's regexp has the same leftmost-first semantics as the Oniguruma
// engine tokenizers uses, but no lookaround, and its \s, \d and \w are
// ASCII; so the classes are rewritten to their Unicode meaning, and the
// one lookahead real pre-tokenizers use, a trailing `|\s+(?!\S)|\s+`, is
// matched by hand (wsTail). Anything else Go cannot express exactly is
// refused.
type splitRegex struct {
	head   *regexp.Regexp // nil when the whole expression is the tail
	wsTail bool
}

const (
	wsTail = `\s+(?!\S)|\s+`
	// unicodeSpace is Unicode's White_Space property, which is \s in
	// Oniguruma and in Rust's regex crate.
	unicodeSpace = `\t-\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}`
	unicodeWord  = `\p{L}\p{M}\p{Nd}\p{Pc}`
)

func compileSplitRegex(expr, field string) (*splitRegex, error) {
	r := &splitRegex{}
	head := expr
	if expr == wsTail {
		return &splitRegex{wsTail: true}, nil
	}
	if strings.HasSuffix(expr, "|"+wsTail) {
		head, r.wsTail = strings.TrimSuffix(expr, "|"+wsTail), true
	}
	translated, err := translateRegex(head)
	if err != nil {
		return nil, unsupported(field, "regular expression %q: %v", expr, err)
	}
	re, err := syntax.Parse(translated, syntax.Perl)
	if err != nil {
		return nil, unsupported(field, "regular expression %q: %v", expr, err)
	}
	if op, ok := findAnchor(re); ok {
		return nil, unsupported(field, "regular expression %q: anchor or word boundary (%v) cannot be matched piece by piece", expr, op)
	}
	if r.head, err = regexp.Compile(translated); err != nil {
		return nil, unsupported(field, "regular expression %q: %v", expr, err)
	}
	return r, nil
}

// translateRegex rewrites the Oniguruma escapes whose meaning differs in
// Go and refuses the constructs Go lacks.
func translateRegex(expr string) (string, error) {
	var b strings.Builder
	inClass := false
	for i := 0; i < len(expr); i++ {
		c := expr[i]
		switch {
		case c == '\\' && i+1 < len(expr):
			i++
			e := expr[i]
			switch e {
			case 'p', 'P':
				// A Unicode class name, copied whole so that its closing
				// brace is not taken for a quantifier's.
				end := i + 1
				if end < len(expr) && expr[end] == '{' {
					if k := strings.IndexByte(expr[end:], '}'); k >= 0 {
						end += k + 1
					}
				} else {
					end = min(end+1, len(expr))
				}
				b.WriteString(expr[i-1 : end])
				i = end - 1
			case 's':
				b.WriteString(wrapClass(unicodeSpace, inClass, false))
			case 'd':
				b.WriteString(wrapClass(`\p{Nd}`, inClass, false))
			case 'w':
				b.WriteString(wrapClass(unicodeWord, inClass, false))
			case 'S', 'D', 'W':
				if inClass {
					return "", fmt.Errorf(`\%c inside a character class`, e)
				}
				b.WriteString(wrapClass(map[byte]string{'S': unicodeSpace, 'D': `\p{Nd}`, 'W': unicodeWord}[e], false, true))
			case 'h', 'H', 'R', 'X', 'K', 'G', 'k', 'g':
				return "", fmt.Errorf(`\%c`, e)
			default:
				if '1' <= e && e <= '9' {
					return "", fmt.Errorf("back reference \\%c", e)
				}
				b.WriteByte('\\')
				b.WriteByte(e)
			}
		case inClass:
			if c == ']' {
				inClass = false
			} else if c == '[' {
				return "", fmt.Errorf("nested character class")
			}
			b.WriteByte(c)
		case c == '[':
			inClass = true
			b.WriteByte(c)
			// A leading ']' or '^]' is a literal bracket.
			if strings.HasPrefix(expr[i+1:], "^") {
				b.WriteByte('^')
				i++
			}
			if strings.HasPrefix(expr[i+1:], "]") {
				b.WriteString(`\]`)
				i++
			}
		case c == '(' && strings.HasPrefix(expr[i:], "(?="), c == '(' && strings.HasPrefix(expr[i:], "(?!"),
			c == '(' && strings.HasPrefix(expr[i:], "(?<"), c == '(' && strings.HasPrefix(expr[i:], "(?>"):
			return "", fmt.Errorf("lookaround or atomic group %q", expr[i:min(len(expr), i+3)])
		case (c == '+' || c == '*' || c == '?' || c == '}') && i+1 < len(expr) && expr[i+1] == '+':
			return "", fmt.Errorf("possessive quantifier %q", expr[i:i+2])
		default:
			b.WriteByte(c)
		}
	}
	if inClass {
		return "", fmt.Errorf("unterminated character class")
	}
	return b.String(), nil
}

func wrapClass(ranges string, inClass, negate bool) string {
	switch {
	case inClass:
		return ranges
	case negate:
		return "[^" + ranges + "]"
	}
	return "[" + ranges + "]"
}

func findAnchor(re *syntax.Regexp) (syntax.Op, bool) {
	switch re.Op {
	case syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText,
		syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return re.Op, true
	}
	for _, sub := range re.Sub {
		if op, ok := findAnchor(sub); ok {
			return op, true
		}
	}
	return 0, false
}

// next returns the first match at or after i as [start, end) with
// end > start, or (-1, -1).
func (r *splitRegex) next(s string, i int) (int, int) {
	for i < len(s) {
		hs, he := -1, -1
		if r.head != nil {
			if loc := r.head.FindStringIndex(s[i:]); loc != nil {
				hs, he = i+loc[0], i+loc[1]
			}
		}
		if r.wsTail {
			lim := len(s)
			if hs >= 0 {
				lim = hs
			}
			if w := strings.IndexFunc(s[i:lim], unicode.IsSpace); w >= 0 {
				w += i
				e := w + len(s[w:]) - len(strings.TrimLeftFunc(s[w:], unicode.IsSpace))
				if e < len(s) {
					// \s+(?!\S) gives the last space back to the next
					// token; a single space falls to \s+.
					if _, n := utf8.DecodeLastRuneInString(s[w:e]); e-n > w {
						e -= n
					}
				}
				return w, e
			}
		}
		if hs < 0 {
			return -1, -1
		}
		if he > hs {
			return hs, he
		}
		// An empty match yields no piece; search on after it.
		_, n := utf8.DecodeRuneInString(s[hs:])
		i = hs + max(n, 1)
	}
	return -1, -1
}
