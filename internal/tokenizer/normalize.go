// This file holds the normalizers of tokenizer.json: lowercase, prepend, replace, Unicode forms.

package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

type normalizer interface {
	normalize(s string) string
}

// normalizerJSON holds the fields of every supported normalizer type.
type normalizerJSON struct {
	Type        string            `json:"type"`
	Normalizers []json.RawMessage `json:"normalizers"`
	Prepend     string            `json:"prepend"`
	Pattern     patternJSON       `json:"pattern"`
	Content     string            `json:"content"`
	StripLeft   bool              `json:"strip_left"`
	StripRight  bool              `json:"strip_right"`
}

// patternJSON is the {"String": ...} or {"Regex": ...} of Split and Replace.
type patternJSON struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

// literal returns the literal pattern, refusing a regular expression.
func (p patternJSON) literal(field string) (string, error) {
	switch {
	case p.String != nil:
		return *p.String, nil
	case p.Regex != nil:
		return "", unsupported(field, "regular expression %q (only {\"String\": ...} patterns are implemented here)", *p.Regex)
	}
	return "", invalid(field, "missing")
}

// parseNormalizer returns nil for a null normalizer and for one that leaves
// text unchanged.
func parseNormalizer(raw json.RawMessage, field string) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var j normalizerJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return nil, invalid(field, "%v", err)
	}
	switch j.Type {
	case "NFC":
		return unicodeForm{norm.NFC}, nil
	case "NFD":
		return unicodeForm{norm.NFD}, nil
	case "NFKC":
		return unicodeForm{norm.NFKC}, nil
	case "NFKD":
		return unicodeForm{norm.NFKD}, nil
	case "Lowercase":
		return lowercase{}, nil
	case "Prepend":
		return prepend(j.Prepend), nil
	case "Replace":
		if j.Pattern.Regex != nil {
			re, err := compileSplitRegex(*j.Pattern.Regex, field+".pattern")
			if err != nil {
				return nil, err
			}
			return replaceRegex{re: re, new: j.Content}, nil
		}
		old, err := j.Pattern.literal(field + ".pattern")
		if err != nil {
			return nil, err
		}
		if old == "" {
			return nil, invalid(field+".pattern", "empty")
		}
		return replace{old: old, new: j.Content}, nil
	case "Strip":
		return strip{left: j.StripLeft, right: j.StripRight}, nil
	case "Sequence":
		var seq sequence
		for i, r := range j.Normalizers {
			n, err := parseNormalizer(r, fmt.Sprintf("%s.normalizers[%d]", field, i))
			if err != nil {
				return nil, err
			}
			if n != nil {
				seq = append(seq, n)
			}
		}
		switch len(seq) {
		case 0:
			return nil, nil
		case 1:
			return seq[0], nil
		}
		return seq, nil
	case "":
		return nil, invalid(field+".type", "missing")
	}
	return nil, unsupported(field+".type", "normalizer %q", j.Type)
}

type sequence []normalizer

func (q sequence) normalize(s string) string {
	for _, n := range q {
		s = n.normalize(s)
	}
	return s
}

type lowercase struct{}

// normalize lowercases rune by rune like Rust's char::to_lowercase, which
// differs from Go's mapping only where one rune becomes two.
func (lowercase) normalize(s string) string {
	return strings.Map(unicode.ToLower, strings.ReplaceAll(s, "\u0130", "i\u0307"))
}

type prepend string

func (p prepend) normalize(s string) string {
	if s == "" {
		return s
	}
	return string(p) + s
}

type replace struct{ old, new string }

func (r replace) normalize(s string) string { return strings.ReplaceAll(s, r.old, r.new) }

// replaceRegex replaces every match of a regular expression; the
// replacement is literal, as in tokenizers.
type replaceRegex struct {
	re  *splitRegex
	new string
}

func (r replaceRegex) normalize(s string) string {
	var b strings.Builder
	last := 0
	for i := 0; i < len(s); {
		start, end := r.re.next(s, i)
		if start < 0 {
			break
		}
		b.WriteString(s[last:start])
		b.WriteString(r.new)
		last, i = end, end
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// unicodeForm is one of the four Unicode normalization forms. Text that is
// already in the form (nearly all text for NFC) is returned without a
// copy.
type unicodeForm struct{ f norm.Form }

func (u unicodeForm) normalize(s string) string {
	// ASCII is in every form; checking it eight bytes at a time is several
	// times faster than the norm package's own check.
	if isASCII(s) || u.f.IsNormalString(s) {
		return s
	}
	return u.f.String(s)
}

// isASCII reports whether s is all ASCII.
func isASCII(s string) bool {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		w := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		if w&0x8080808080808080 != 0 {
			return false
		}
	}
	for ; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

type strip struct{ left, right bool }

func (t strip) normalize(s string) string {
	if t.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if t.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}
