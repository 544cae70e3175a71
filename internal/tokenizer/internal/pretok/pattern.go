// Package pretok splits text the way the pre-tokenizer regular expressions of
// well-known Hugging Face tokenizers do, and maps bytes to the byte-level
// alphabet of GPT-2.
//
// Those expressions rely on a negative lookahead (`\s+(?!\S)`), which Go's
// regexp cannot express, and their results depend on backtracking order.
// Rather than ship a backtracking engine, each alternative of each known
// expression is implemented by hand with the exact leftmost-first semantics
// of the original; an expression is recognised by its source text, so an
// unknown one is refused instead of being approximated.
package pretok

import (
	"unicode"
	"unicode/utf8"
)

// Pattern is a known pre-tokenization regular expression.
type Pattern struct {
	name   string
	source string
	alts   []alt
	// asciiWords says that an ASCII letter, or a space and an ASCII
	// letter, can only start a letter run (` ?\p{L}+` or
	// `[^\r\n\p{L}\p{N}]?\p{L}+` after the contractions), which matchAt
	// then takes without trying the alternatives in turn: most pieces of
	// most text are such words.
	asciiWords bool
	// digits is the most digits of a number piece (0: unbounded).
	digits int
}

// Name returns the short name of the pattern, such as "gpt2" or "llama3".
func (p *Pattern) Name() string { return p.name }

type altKind uint8

const (
	contraction    altKind = iota // '(s|t|re|ve|m|ll|d)
	letters                       // P?\p{L}+
	numbers                       // P?\p{N}{1,max}
	punct                         // ' '?[^\s\p{L}\p{N}]+[trail]*
	newlines                      // \s*[\r\n]+
	trailingSpaces                // \s+(?!\S)
	spaces                        // \s+
	casedLower                    // P?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+C?
	casedUpper                    // P?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*C?
)

type prefixKind uint8

const (
	noPrefix    prefixKind = iota
	spacePrefix            // ` ?`
	otherPrefix            // `[^\r\n\p{L}\p{N}]?`
)

// alt is one alternative of an expression; its fields parameterise the
// families above, which is all the known expressions need.
type alt struct {
	kind   altKind
	prefix prefixKind
	fold   bool   // contractions match case-insensitively
	max    int    // numbers: most runes in one match, 0 for unbounded
	trail  string // punct: ASCII bytes allowed to follow the run
	suffix bool   // cased words: optional case-insensitive contraction after
}

var (
	// GPT2 is the expression of GPT-2 and of the ByteLevel pre-tokenizer's
	// use_regex option.
	GPT2 = &Pattern{name: "gpt2", source: gpt2Source, asciiWords: true, alts: []alt{
		{kind: contraction},
		{kind: letters, prefix: spacePrefix},
		{kind: numbers, prefix: spacePrefix},
		{kind: punct, prefix: spacePrefix},
		{kind: trailingSpaces},
		{kind: spaces},
	}}
	// Llama3 is the expression of Llama 3 (OpenAI's cl100k_base).
	Llama3 = &Pattern{name: "llama3", source: llama3Source, asciiWords: true, digits: 3, alts: []alt{
		{kind: contraction, fold: true},
		{kind: letters, prefix: otherPrefix},
		{kind: numbers, max: 3},
		{kind: punct, prefix: spacePrefix, trail: "\r\n"},
		{kind: newlines},
		{kind: trailingSpaces},
		{kind: spaces},
	}}
	// Qwen2 is the expression of Qwen2, Qwen2.5 and Qwen3: Llama 3's with
	// single digits.
	Qwen2 = &Pattern{name: "qwen2", source: qwen2Source, asciiWords: true, digits: 1, alts: []alt{
		{kind: contraction, fold: true},
		{kind: letters, prefix: otherPrefix},
		{kind: numbers, max: 1},
		{kind: punct, prefix: spacePrefix, trail: "\r\n"},
		{kind: newlines},
		{kind: trailingSpaces},
		{kind: spaces},
	}}
	// Tekken is the expression of Mistral NeMo's Tekken tokenizer.
	Tekken = &Pattern{name: "tekken", source: tekkenSource, digits: 1, alts: []alt{
		{kind: casedLower, prefix: otherPrefix},
		{kind: casedUpper, prefix: otherPrefix},
		{kind: numbers, max: 1},
		{kind: punct, prefix: spacePrefix, trail: "\r\n/"},
		{kind: newlines},
		{kind: trailingSpaces},
		{kind: spaces},
	}}
	// O200k is the expression of OpenAI's o200k_base.
	O200k = &Pattern{name: "o200k", source: o200kSource, digits: 3, alts: []alt{
		{kind: casedLower, prefix: otherPrefix, suffix: true},
		{kind: casedUpper, prefix: otherPrefix, suffix: true},
		{kind: numbers, max: 3},
		{kind: punct, prefix: spacePrefix, trail: "\r\n/"},
		{kind: newlines},
		{kind: trailingSpaces},
		{kind: spaces},
	}}
)

// Patterns lists the built-in patterns.
var Patterns = []*Pattern{GPT2, Llama3, Qwen2, Tekken, O200k}

// Canonical source texts, as they appear in a tokenizer.json after JSON
// unescaping.
const (
	gpt2Source   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	llama3Source = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	qwen2Source  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	tekkenSource = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	o200kSource  = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// spellings maps every accepted source text to its pattern. Some
// tokenizers carry tiktoken's spelling, which differs only in ways that
// cannot change a match: possessive quantifiers after a class that cannot
// start the rest, a factored contraction group, and `[\r\n]` for
// `[\r\n]+` after a greedy `\s*` (which already ends at the last line break).
var spellings = func() map[string]*Pattern {
	m := make(map[string]*Pattern)
	for _, p := range Patterns {
		m[p.source] = p
	}
	m[`'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`] = GPT2
	m[`'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+`] = Llama3
	return m
}()

// Lookup returns the built-in pattern whose source text is expr.
func Lookup(expr string) (*Pattern, bool) {
	p, ok := spellings[expr]
	return p, ok
}

// Source returns the source text of p as Hugging Face tokenizers write it.
func (p *Pattern) Source() string { return p.source }

// Next returns the first match of p in s at or after byte offset i, or
// (-1, -1) when there is none. No alternative of a known pattern matches
// the empty string, so end > start.
func (p *Pattern) Next(s string, i int) (start, end int) {
	for i < len(s) {
		if e := p.matchAt(s, i); e > i {
			return i, e
		}
		_, n := utf8.DecodeRuneInString(s[i:])
		i += n
	}
	return -1, -1
}

// Split appends to dst the pieces of s: every match and every non-empty gap
// between matches, in order (the "Isolated" behaviour). The pieces
// concatenate back to s.
func (p *Pattern) Split(dst []string, s string) []string {
	return SplitIsolated(dst, s, p.Next)
}

// SplitIsolated is Split for any finder: next returns the first match at
// or after i as [start, end), or start < 0 for none.
func SplitIsolated(dst []string, s string, next func(s string, i int) (start, end int)) []string {
	last := 0
	for i := 0; i < len(s); {
		start, end := next(s, i)
		if start < 0 {
			break
		}
		if start > last {
			dst = append(dst, s[last:start])
		}
		dst = append(dst, s[start:end])
		last, i = end, end
	}
	if last < len(s) {
		dst = append(dst, s[last:])
	}
	return dst
}

// matchAt returns the end of the match starting exactly at i, or -1: the
// first alternative that matches wins, as in a backtracking engine.
func (p *Pattern) matchAt(s string, i int) int {
	c := s[i]
	if p.asciiWords {
		j := i
		if c == ' ' && i+1 < len(s) {
			j++
			c = s[j]
		}
		if c < utf8.RuneSelf && ascii[c]&clsLetter != 0 {
			return runClass(s, j+1, clsLetter)
		}
		c = s[i]
	}
	if c < utf8.RuneSelf && ascii[c]&clsNumber != 0 {
		// No alternative before the numbers' takes a digit.
		return numberRun(s, i, p.digits)
	}
	return p.matchAlts(s, i)
}

// matchAlts is matchAt trying every alternative in turn.
func (p *Pattern) matchAlts(s string, i int) int {
	for k := range p.alts {
		if e := p.alts[k].match(s, i); e > i {
			return e
		}
	}
	return -1
}

func (a *alt) match(s string, i int) int {
	switch a.kind {
	case contraction:
		return matchContraction(s, i, a.fold)
	case newlines:
		return matchNewlines(s, i)
	case trailingSpaces:
		return matchTrailingSpaces(s, i)
	case spaces:
		return runClass(s, i, clsSpace)
	}
	// An optional one-rune prefix, then the core: first with the prefix
	// consumed, then, as backtracking would, without it.
	if n := a.prefixLen(s, i); n > 0 {
		if e := a.core(s, i+n); e > i+n {
			return e
		}
	}
	if e := a.core(s, i); e > i {
		return e
	}
	return -1
}

// prefixLen returns the length of the optional prefix rune at i, or 0.
func (a *alt) prefixLen(s string, i int) int {
	if a.prefix == noPrefix || i >= len(s) {
		return 0
	}
	r, n := decode(s, i)
	switch {
	case a.prefix == spacePrefix && r == ' ':
		return n
	case a.prefix == otherPrefix && r != '\r' && r != '\n' && !isLetter(r) && !isNumber(r):
		return n
	}
	return 0
}

// core returns the end of the alternative's body matched at j, or j.
func (a *alt) core(s string, j int) int {
	switch a.kind {
	case letters:
		return runClass(s, j, clsLetter)
	case numbers:
		return numberRun(s, j, a.max)
	case punct:
		e := runClass(s, j, clsPunct)
		if e == j {
			return j
		}
		for e < len(s) && containsByte(a.trail, s[e]) {
			e++
		}
		return e
	case casedLower:
		return a.withSuffix(s, j, casedLowerCore(s, j))
	case casedUpper:
		return a.withSuffix(s, j, casedUpperCore(s, j))
	}
	return j
}

func (a *alt) withSuffix(s string, start, end int) int {
	if end > start && a.suffix {
		if e := matchContraction(s, end, true); e > end {
			return e
		}
	}
	return end
}

// runClass returns the end of the longest run of runes in class cls
// starting at i.
func runClass(s string, i int, cls uint8) int {
	for i < len(s) {
		if c := s[i]; c < utf8.RuneSelf {
			if ascii[c]&cls == 0 {
				return i
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if !inClass(r, cls) {
			return i
		}
		i += n
	}
	return i
}

func inClass(r rune, cls uint8) bool {
	switch cls {
	case clsSpace:
		return unicode.IsSpace(r)
	case clsLetter:
		return unicode.IsLetter(r)
	case clsNumber:
		return unicode.IsNumber(r)
	case clsPunct:
		return isPunct(r)
	case clsUpper:
		return isUpperish(r)
	case clsLower:
		return isLowerish(r)
	}
	return false
}

func numberRun(s string, i, max int) int {
	for k := 0; i < len(s) && (max == 0 || k < max); k++ {
		r, n := decode(s, i)
		if !isNumber(r) {
			break
		}
		i += n
	}
	return i
}

var contractions = [...]string{"s", "t", "re", "ve", "m", "ll", "d"}

func matchContraction(s string, i int, fold bool) int {
	if i >= len(s) || s[i] != '\'' {
		return -1
	}
	for _, c := range contractions {
		j := i + 1
		for k := 0; k < len(c) && j >= 0; k++ {
			j = matchLetter(s, j, c[k], fold)
		}
		if j > i+1 {
			return j
		}
	}
	return -1
}

// matchLetter matches the ASCII lower-case letter c at i. Case-insensitive
// matching follows Unicode simple case folding, under which the long s
// (U+017F) is an s.
func matchLetter(s string, i int, c byte, fold bool) int {
	if i >= len(s) {
		return -1
	}
	if s[i] == c || fold && s[i] == c-'a'+'A' {
		return i + 1
	}
	if fold && c == 's' && len(s) >= i+2 && s[i:i+2] == "\u017f" {
		return i + 2
	}
	return -1
}

// matchNewlines implements `\s*[\r\n]+`: the greedy `\s*` gives back
// whitespace until a line break follows, so the match ends just after the
// last \r or \n of the whitespace run.
func matchNewlines(s string, i int) int {
	end := -1
	for j := i; j < len(s); {
		r, n := decode(s, j)
		if !unicode.IsSpace(r) {
			break
		}
		j += n
		if r == '\r' || r == '\n' {
			end = j
		}
	}
	return end
}

// matchTrailingSpaces implements `\s+(?!\S)`: a whitespace run that reaches
// the end of the text, or the run without its last rune, which then is the
// whitespace the lookahead sees.
func matchTrailingSpaces(s string, i int) int {
	e := runClass(s, i, clsSpace)
	if e == i || e == len(s) {
		return e
	}
	_, n := utf8.DecodeLastRuneInString(s[i:e])
	if e-n > i {
		return e - n
	}
	return -1
}

// casedLowerCore implements `U*W+` where U and W overlap: the greedy U*
// gives back runes until a W rune follows.
func casedLowerCore(s string, i int) int {
	k := runClass(s, i, clsUpper)
	for {
		if e := runClass(s, k, clsLower); e > k {
			return e
		}
		if k == i {
			return i
		}
		_, n := utf8.DecodeLastRuneInString(s[i:k])
		k -= n
	}
}

// casedUpperCore implements `U+W*`.
func casedUpperCore(s string, i int) int {
	k := runClass(s, i, clsUpper)
	if k == i {
		return i
	}
	return runClass(s, k, clsLower)
}

func containsByte(set string, b byte) bool {
	for i := 0; i < len(set); i++ {
		if set[i] == b {
			return true
		}
	}
	return false
}

// decode returns the rune at i. An invalid byte decodes as U+FFFD, a symbol,
// which puts it in the punctuation class like any other non-letter,
// non-number, non-space.
func decode(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// ASCII classes, precomputed because nearly all text is ASCII.
const (
	clsSpace = 1 << iota
	clsLetter
	clsNumber
	clsUpper
	clsLower
	clsPunct // [^\s\p{L}\p{N}]
)

var ascii = func() (t [utf8.RuneSelf]uint8) {
	for c := range t {
		r := rune(c)
		switch {
		case unicode.IsSpace(r):
			t[c] = clsSpace
		case 'a' <= r && r <= 'z':
			t[c] = clsLetter | clsLower
		case 'A' <= r && r <= 'Z':
			t[c] = clsLetter | clsUpper
		case '0' <= r && r <= '9':
			t[c] = clsNumber
		default:
			t[c] = clsPunct
		}
	}
	return t
}()

func isLetter(r rune) bool {
	if r < utf8.RuneSelf {
		return ascii[r]&clsLetter != 0
	}
	return unicode.IsLetter(r)
}

func isNumber(r rune) bool {
	if r < utf8.RuneSelf {
		return ascii[r]&clsNumber != 0
	}
	return unicode.IsNumber(r)
}

// isPunct is `[^\s\p{L}\p{N}]`.
func isPunct(r rune) bool {
	if r < utf8.RuneSelf {
		return ascii[r]&clsPunct != 0
	}
	return !unicode.IsSpace(r) && !unicode.IsLetter(r) && !unicode.IsNumber(r)
}

// isUpperish is `[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]`.
func isUpperish(r rune) bool {
	if r < utf8.RuneSelf {
		return ascii[r]&clsUpper != 0
	}
	return unicode.In(r, unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M)
}

// isLowerish is `[\p{Ll}\p{Lm}\p{Lo}\p{M}]`.
func isLowerish(r rune) bool {
	if r < utf8.RuneSelf {
		return ascii[r]&clsLower != 0
	}
	return unicode.In(r, unicode.Ll, unicode.Lm, unicode.Lo, unicode.M)
}
