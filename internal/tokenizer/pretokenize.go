// This file holds the pre-tokenizers of tokenizer.json: Metaspace, ByteLevel, Split, Digits.

package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"kvrouter/internal/tokenizer/internal/pretok"
)

// preStep is one pre-tokenizer: it appends the pieces of piece to dst.
type preStep interface {
	split(dst []string, piece string) []string
}

type preTokenizerJSON struct {
	Type           string            `json:"type"`
	PreTokenizers  []json.RawMessage `json:"pretokenizers"`
	AddPrefixSpace bool              `json:"add_prefix_space"`
	UseRegex       *bool             `json:"use_regex"`
	Pattern        patternJSON       `json:"pattern"`
	Behavior       string            `json:"behavior"`
	Invert         bool              `json:"invert"`
	Individual     bool              `json:"individual_digits"`
	Replacement    string            `json:"replacement"`
	PrependScheme  string            `json:"prepend_scheme"`
	Split          *bool             `json:"split"`
}

// parsePreTokenizer flattens the pre-tokenizer into steps. byteLevel
// reports that the last step is ByteLevel, whose mapping to the byte-level
// alphabet the model then performs.
func parsePreTokenizer(raw json.RawMessage, field string) (steps []preStep, byteLevel bool, err error) {
	if isNull(raw) {
		return nil, false, nil
	}
	if err := appendPreSteps(&steps, &byteLevel, raw, field); err != nil {
		return nil, false, err
	}
	return steps, byteLevel, nil
}

func appendPreSteps(steps *[]preStep, byteLevel *bool, raw json.RawMessage, field string) error {
	var j preTokenizerJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return invalid(field, "%v", err)
	}
	if *byteLevel {
		return unsupported(field, "a pre-tokenizer after ByteLevel (ByteLevel must come last)")
	}
	switch j.Type {
	case "Sequence":
		for i, r := range j.PreTokenizers {
			if err := appendPreSteps(steps, byteLevel, r, fmt.Sprintf("%s.pretokenizers[%d]", field, i)); err != nil {
				return err
			}
		}
		return nil
	case "ByteLevel":
		*byteLevel = true
		// use_regex defaults to true in tokenizers.
		useRegex := j.UseRegex == nil || *j.UseRegex
		if j.AddPrefixSpace || useRegex {
			*steps = append(*steps, byteLevelStep{addPrefixSpace: j.AddPrefixSpace, useRegex: useRegex})
		}
		return nil
	case "Split":
		b, err := parseBehavior(j.Behavior, field+".behavior")
		if err != nil {
			return err
		}
		switch {
		case j.Pattern.Regex != nil:
			// The well-known expressions have hand-written matchers, several
			// times faster than a regexp; others go to Go's regexp.
			if p, ok := pretok.Lookup(*j.Pattern.Regex); ok {
				*steps = append(*steps, splitStep{find: p.Next, behavior: b, invert: j.Invert, pattern: p})
				return nil
			}
			re, err := compileSplitRegex(*j.Pattern.Regex, field+".pattern")
			if err != nil {
				return err
			}
			*steps = append(*steps, splitStep{find: re.next, behavior: b, invert: j.Invert})
		case j.Pattern.String != nil:
			lit := *j.Pattern.String
			if lit == "" {
				return invalid(field+".pattern", "empty string")
			}
			*steps = append(*steps, splitStep{find: literalFinder(lit), behavior: b, invert: j.Invert})
		default:
			return invalid(field+".pattern", "missing")
		}
		return nil
	case "Metaspace":
		m, err := parseMetaspace(j, field)
		if err != nil {
			return err
		}
		*steps = append(*steps, m)
		return nil
	case "Digits":
		b := contiguous
		if j.Individual {
			b = isolated
		}
		*steps = append(*steps, splitStep{find: nextDigit, behavior: b})
		return nil
	case "":
		return invalid(field+".type", "missing")
	}
	return unsupported(field+".type", "pre-tokenizer %q", j.Type)
}

// prependScheme says where Metaspace adds its replacement character.
type prependScheme uint8

const (
	prependAlways prependScheme = iota
	prependNever
	prependFirst // only before the piece at the start of the input
)

// metaspaceStep is the Metaspace pre-tokenizer of SentencePiece-style
// tokenizers: spaces become the replacement character ("▁"), which is
// prepended to the text and, with split, starts every piece.
type metaspaceStep struct {
	repl    string
	scheme  prependScheme
	splitOn bool
}

func parseMetaspace(j preTokenizerJSON, field string) (metaspaceStep, error) {
	m := metaspaceStep{repl: j.Replacement, splitOn: j.Split == nil || *j.Split}
	if utf8.RuneCountInString(m.repl) != 1 {
		return m, invalid(field+".replacement", "%q (want one character)", m.repl)
	}
	switch j.PrependScheme {
	case "always":
	case "never":
		m.scheme = prependNever
	case "first":
		m.scheme = prependFirst
	case "":
		// Files older than prepend_scheme say add_prefix_space.
		if !j.AddPrefixSpace {
			m.scheme = prependNever
		}
	default:
		return m, invalid(field+".prepend_scheme", "%q (want always, never or first)", j.PrependScheme)
	}
	return m, nil
}

func (m metaspaceStep) split(dst []string, piece string) []string {
	return m.splitAt(dst, piece, true)
}

// splitAt is split for a piece that does or does not start the input:
// with prepend_scheme "first", tokenizers prepends only at offset 0, so
// text after an added token gets no "▁".
func (m metaspaceStep) splitAt(dst []string, piece string, atStart bool) []string {
	piece = strings.ReplaceAll(piece, " ", m.repl)
	if m.scheme == prependAlways || m.scheme == prependFirst && atStart {
		if !strings.HasPrefix(piece, m.repl) {
			piece = m.repl + piece
		}
	}
	if !m.splitOn {
		return append(dst, piece)
	}
	return splitStep{find: literalFinder(m.repl), behavior: mergedWithNext}.split(dst, piece)
}

// byteLevelStep is the splitting half of the ByteLevel pre-tokenizer; the
// byte mapping is left to the model.
type byteLevelStep struct {
	addPrefixSpace bool
	useRegex       bool
}

func (s byteLevelStep) split(dst []string, piece string) []string {
	if s.addPrefixSpace && !strings.HasPrefix(piece, " ") {
		piece = " " + piece
	}
	if s.useRegex {
		return pretok.GPT2.Split(dst, piece)
	}
	return append(dst, piece)
}

type behavior uint8

const (
	removed behavior = iota
	isolated
	mergedWithPrevious
	mergedWithNext
	contiguous
)

func parseBehavior(s, field string) (behavior, error) {
	switch s {
	case "Removed":
		return removed, nil
	case "Isolated":
		return isolated, nil
	case "MergedWithPrevious":
		return mergedWithPrevious, nil
	case "MergedWithNext":
		return mergedWithNext, nil
	case "Contiguous":
		return contiguous, nil
	}
	return 0, invalid(field, "%q (want Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous)", s)
}

// splitStep splits on the matches of find, which returns the first match at
// or after i as (start, end) with end > start, or (-1, -1).
type splitStep struct {
	find     func(s string, i int) (int, int)
	behavior behavior
	invert   bool
	pattern  *pretok.Pattern // the known expression find matches, if any
}

func literalFinder(lit string) func(string, int) (int, int) {
	return func(s string, i int) (int, int) {
		k := strings.Index(s[i:], lit)
		if k < 0 {
			return -1, -1
		}
		return i + k, i + k + len(lit)
	}
}

// nextDigit finds single ASCII digits, the matches of the Digits
// pre-tokenizer.
func nextDigit(s string, i int) (int, int) {
	for ; i < len(s); i++ {
		if '0' <= s[i] && s[i] <= '9' {
			return i, i + 1
		}
	}
	return -1, -1
}

type span struct {
	start, end int
	match      bool
}

func (st splitStep) split(dst []string, s string) []string {
	if st.behavior == isolated {
		// Every span is a piece, so matches and gaps need no bookkeeping.
		return pretok.SplitIsolated(dst, s, st.find)
	}
	var spans []span
	last := 0
	for i := 0; i < len(s); {
		start, end := st.find(s, i)
		if start < 0 {
			break
		}
		if start > last {
			spans = append(spans, span{last, start, st.invert})
		}
		spans = append(spans, span{start, end, !st.invert})
		last, i = end, end
	}
	if last < len(s) {
		spans = append(spans, span{last, len(s), st.invert})
	}
	for _, sp := range applyBehavior(spans, st.behavior) {
		dst = append(dst, s[sp.start:sp.end])
	}
	return dst
}

// applyBehavior groups spans as tokenizers' SplitDelimiterBehavior does.
func applyBehavior(spans []span, b behavior) []span {
	var out []span
	switch b {
	case removed:
		for _, sp := range spans {
			if !sp.match {
				out = append(out, sp)
			}
		}
	case mergedWithPrevious:
		prevMatch := false
		for _, sp := range spans {
			if sp.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, sp)
			}
			prevMatch = sp.match
		}
	case mergedWithNext:
		prevMatch := false
		for i := len(spans) - 1; i >= 0; i-- {
			sp := spans[i]
			if sp.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].start = sp.start
			} else {
				out = append(out, sp)
			}
			prevMatch = sp.match
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	case contiguous:
		prevMatch := false
		for _, sp := range spans {
			if sp.match == prevMatch && len(out) > 0 {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, sp)
			}
			prevMatch = sp.match
		}
	default:
		out = spans
	}
	return out
}

// onePattern returns the known expression that is the whole of a
// pre-tokenizer, isolating its matches, or nil: the usual byte-level
// tokenizer (a Split on its expression, then ByteLevel without a regex, or
// ByteLevel with GPT-2's), whose pieces can go to the model as they are
// found.
func onePattern(steps []preStep) *pretok.Pattern {
	if len(steps) != 1 {
		return nil
	}
	switch st := steps[0].(type) {
	case splitStep:
		// Isolated keeps every span, matches and gaps alike, whatever
		// invert says.
		if st.behavior == isolated {
			return st.pattern
		}
	case byteLevelStep:
		if st.useRegex && !st.addPrefixSpace {
			return pretok.GPT2
		}
	}
	return nil
}
