// This file holds the decoders of tokenizer.json: byte-level, byte fallback, metaspace and more.

package tokenizer

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"kvrouter/internal/tokenizer/internal/pretok"
)

// decodeStep is one decoder: it rewrites the list of token strings, and the
// results are concatenated at the end.
type decodeStep interface {
	decode(tokens []string) []string
}

type decoderJSON struct {
	Type     string            `json:"type"`
	Decoders []json.RawMessage `json:"decoders"`
	Pattern  patternJSON       `json:"pattern"`
	Content  json.RawMessage   `json:"content"`
	Start    int               `json:"start"`
	Stop     int               `json:"stop"`
	// Metaspace
	Replacement    string `json:"replacement"`
	PrependScheme  string `json:"prepend_scheme"`
	AddPrefixSpace bool   `json:"add_prefix_space"`
}

// parseDecoder returns the steps of the decoder; a null decoder is
// reported by ok=false, because tokenizers then joins tokens with spaces.
func parseDecoder(raw json.RawMessage, field string) (steps []decodeStep, ok bool, err error) {
	if isNull(raw) {
		return nil, false, nil
	}
	if err := appendDecodeSteps(&steps, raw, field); err != nil {
		return nil, false, err
	}
	return steps, true, nil
}

func appendDecodeSteps(steps *[]decodeStep, raw json.RawMessage, field string) error {
	var j decoderJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return invalid(field, "%v", err)
	}
	switch j.Type {
	case "Sequence":
		for i, r := range j.Decoders {
			if err := appendDecodeSteps(steps, r, fmt.Sprintf("%s.decoders[%d]", field, i)); err != nil {
				return err
			}
		}
	case "ByteLevel":
		*steps = append(*steps, byteLevelDecoder{})
	case "ByteFallback":
		*steps = append(*steps, byteFallbackDecoder{})
	case "Fuse":
		*steps = append(*steps, fuseDecoder{})
	case "Metaspace":
		r, n := utf8.DecodeRuneInString(j.Replacement)
		if n == 0 || n != len(j.Replacement) {
			return invalid(field+".replacement", "%q (want one character)", j.Replacement)
		}
		strip := j.PrependScheme == "always" || j.PrependScheme == "first" || j.PrependScheme == "" && j.AddPrefixSpace
		*steps = append(*steps, metaspaceDecoder{repl: r, stripFirst: strip})
	case "Replace":
		old, err := j.Pattern.literal(field + ".pattern")
		if err != nil {
			return err
		}
		var content string
		if err := json.Unmarshal(j.Content, &content); err != nil {
			return invalid(field+".content", "want a string")
		}
		*steps = append(*steps, replaceDecoder{old: old, new: content})
	case "Strip":
		var content string
		if err := json.Unmarshal(j.Content, &content); err != nil || utf8.RuneCountInString(content) != 1 {
			return invalid(field+".content", "want a one-character string")
		}
		if j.Start < 0 || j.Stop < 0 {
			return invalid(field, "negative start or stop")
		}
		r, _ := utf8.DecodeRuneInString(content)
		*steps = append(*steps, stripDecoder{content: r, start: j.Start, stop: j.Stop})
	case "":
		return invalid(field+".type", "missing")
	default:
		return unsupported(field+".type", "decoder %q", j.Type)
	}
	return nil
}

// byteLevelDecoder maps byte-level runes back to bytes. A token with a rune
// outside the alphabet (an added token such as "<|im_end|>" is inside it;
// one with a raw space is not) is taken as-is, and the bytes are turned
// into text the way Rust's String::from_utf8_lossy does.
type byteLevelDecoder struct{}

func (byteLevelDecoder) decode(tokens []string) []string {
	var buf []byte
	for _, t := range tokens {
		var ok bool
		if buf, ok = pretok.AppendDecoded(buf, t); !ok {
			buf = append(buf, t...)
		}
	}
	return []string{lossyUTF8(buf)}
}

// byteFallbackDecoder turns runs of "<0xXX>" tokens back into text; a run
// that is not valid UTF-8 becomes one U+FFFD per byte.
type byteFallbackDecoder struct{}

func (byteFallbackDecoder) decode(tokens []string) []string {
	var out []string
	var run []byte
	flush := func() {
		if len(run) == 0 {
			return
		}
		if utf8.Valid(run) {
			out = append(out, string(run))
		} else {
			for range run {
				out = append(out, "\uFFFD")
			}
		}
		run = run[:0]
	}
	for _, t := range tokens {
		if len(t) == 6 && strings.HasPrefix(t, "<0x") && t[5] == '>' {
			if b, err := strconv.ParseUint(t[3:5], 16, 8); err == nil {
				run = append(run, byte(b))
				continue
			}
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out
}

// metaspaceDecoder turns the replacement character back into spaces; in
// the first token, where the pre-tokenizer prepended it, tokenizers drops
// it instead.
type metaspaceDecoder struct {
	repl       rune
	stripFirst bool
}

func (d metaspaceDecoder) decode(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		var b strings.Builder
		for _, r := range t {
			switch {
			case r != d.repl:
				b.WriteRune(r)
			case i == 0 && d.stripFirst:
			default:
				b.WriteByte(' ')
			}
		}
		out[i] = b.String()
	}
	return out
}

type fuseDecoder struct{}

func (fuseDecoder) decode(tokens []string) []string { return []string{strings.Join(tokens, "")} }

type replaceDecoder struct{ old, new string }

func (r replaceDecoder) decode(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		out[i] = strings.ReplaceAll(t, r.old, r.new)
	}
	return out
}

// stripDecoder removes up to start leading and stop trailing copies of
// content from every token.
type stripDecoder struct {
	content     rune
	start, stop int
}

func (d stripDecoder) decode(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		for k := 0; k < d.start; k++ {
			r, n := utf8.DecodeRuneInString(t)
			if n == 0 || r != d.content {
				break
			}
			t = t[n:]
		}
		for k := 0; k < d.stop; k++ {
			r, n := utf8.DecodeLastRuneInString(t)
			if n == 0 || r != d.content {
				break
			}
			t = t[:len(t)-n]
		}
		out[i] = t
	}
	return out
}

// lossyUTF8 is Rust's String::from_utf8_lossy: each maximal prefix of a
// valid sequence that is cut short, or each invalid byte, becomes one
// U+FFFD. Go's strings.ToValidUTF8 would merge adjacent invalid bytes.
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 8)
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || n > 1 {
			sb.Write(b[i : i+n])
			i += n
			continue
		}
		sb.WriteRune(utf8.RuneError)
		i += invalidPrefixLen(b[i:])
	}
	return sb.String()
}

// invalidPrefixLen returns the length of the maximal subpart of an
// ill-formed sequence at the start of b (at least 1): a valid lead byte
// followed by as many valid continuation bytes as fit before the sequence
// breaks off.
func invalidPrefixLen(b []byte) int {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF) // range of the second byte
	switch {
	case 0xC2 <= c && c <= 0xDF:
		need = 2
	case c == 0xE0:
		need, lo = 3, 0xA0
	case c == 0xED:
		need, hi = 3, 0x9F
	case 0xE1 <= c && c <= 0xEF:
		need = 3
	case c == 0xF0:
		need, lo = 4, 0x90
	case c == 0xF4:
		need, hi = 4, 0x8F
	case 0xF1 <= c && c <= 0xF3:
		need = 4
	default:
		return 1
	}
	n := 1
	if n < len(b) && lo <= b[n] && b[n] <= hi {
		n++
		for n < need && n < len(b) && 0x80 <= b[n] && b[n] <= 0xBF {
			n++
		}
	}
	return n
}
