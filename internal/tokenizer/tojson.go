// This file holds the tojson filter of chat templates: Python's json.dumps, byte for byte.

package tokenizer

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"

	"github.com/ardanlabs/jinja"
)

// filterToJSON is transformers' tojson(x, ensure_ascii=False, indent=None,
// separators=None, sort_keys=False), byte for byte: tool schemas in prompts
// are tokenized.
func filterToJSON(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), fmt.Errorf("tojson: no value")
	}
	opts := jsonOpts{itemSep: ", ", keySep: ": "}
	params := []string{"ensure_ascii", "indent", "separators", "sort_keys"}
	get := func(i int) (jinja.Value, bool) {
		if v, ok := kwargs[params[i]]; ok {
			return v, true
		}
		if i+1 < len(args) {
			return args[i+1], true
		}
		return jinja.Value{}, false
	}
	if v, ok := get(0); ok {
		opts.ascii = v.IsTruthy()
	}
	if v, ok := get(1); ok && !v.IsNone() {
		switch {
		case v.IsInt():
			opts.indent = strings.Repeat(" ", max(int(v.AsInt()), 0))
		case v.IsString():
			opts.indent = v.AsString()
		default:
			return jinja.Undefined(), fmt.Errorf("tojson: indent must be an integer or a string")
		}
		opts.hasIndent, opts.itemSep = true, ","
	}
	if v, ok := get(2); ok && !v.IsNone() {
		if !v.IsList() || v.AsList().Len() != 2 || !v.AsList().Get(0).IsString() || !v.AsList().Get(1).IsString() {
			return jinja.Undefined(), fmt.Errorf("tojson: separators must be two strings")
		}
		opts.itemSep, opts.keySep = v.AsList().Get(0).AsString(), v.AsList().Get(1).AsString()
	}
	if v, ok := get(3); ok {
		opts.sortKeys = v.IsTruthy()
	}
	var b strings.Builder
	if err := opts.encode(&b, args[0], 0); err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewString(b.String()), nil
}

type jsonOpts struct {
	ascii, sortKeys bool
	hasIndent       bool
	indent          string
	itemSep, keySep string
}

func (o *jsonOpts) newline(b *strings.Builder, level int) {
	if o.hasIndent {
		b.WriteByte('\n')
		for range level {
			b.WriteString(o.indent)
		}
	}
}

func (o *jsonOpts) encode(b *strings.Builder, v jinja.Value, level int) error {
	switch {
	case v.IsNone():
		b.WriteString("null")
	case v.IsBool():
		b.WriteString(strconv.FormatBool(v.AsBool()))
	case v.IsInt():
		b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		b.WriteString(pyFloat(v.AsFloat(), true))
	case v.IsString():
		writePyJSONString(b, v.AsString(), o.ascii)
	case v.IsList():
		items := v.AsList().Items
		if len(items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, it := range items {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			o.newline(b, level+1)
			if err := o.encode(b, it, level+1); err != nil {
				return err
			}
		}
		o.newline(b, level)
		b.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		keys := d.OrderedKeys()
		if len(keys) == 0 {
			b.WriteString("{}")
			return nil
		}
		if o.sortKeys {
			slices.Sort(keys)
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			o.newline(b, level+1)
			writePyJSONString(b, k, o.ascii)
			b.WriteString(o.keySep)
			val, _ := d.Get(k)
			if err := o.encode(b, val, level+1); err != nil {
				return err
			}
		}
		o.newline(b, level)
		b.WriteByte('}')
	default:
		return fmt.Errorf("tojson: %s is not JSON serializable", v.String())
	}
	return nil
}

// pyFloat is Python's repr of a float (json=true: json.dumps's spelling
// of the infinities and NaN).
func pyFloat(f float64, json bool) string {
	switch {
	case math.IsInf(f, 1):
		return map[bool]string{true: "Infinity", false: "inf"}[json]
	case math.IsInf(f, -1):
		return map[bool]string{true: "-Infinity", false: "-inf"}[json]
	case math.IsNaN(f):
		return map[bool]string{true: "NaN", false: "nan"}[json]
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // shortest round-trip digits
	mant, expStr, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expStr)
	if -4 <= exp && exp < 16 {
		s := strconv.FormatFloat(f, 'f', -1, 64)
		if !strings.ContainsAny(s, ".") {
			s += ".0"
		}
		return s
	}
	sign := "+"
	if exp < 0 {
		sign, exp = "-", -exp
	}
	return fmt.Sprintf("%se%s%02d", mant, sign, exp)
}

// writePyJSONString quotes s as json.dumps does.
func writePyJSONString(b *strings.Builder, s string, ascii bool) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20 || ascii && r == 0x7f:
				fmt.Fprintf(b, `\u%04x`, r)
			case ascii && r > 0x7f:
				if r > 0xFFFF {
					r1, r2 := utf16.EncodeRune(r)
					fmt.Fprintf(b, `\u%04x\u%04x`, r1, r2)
				} else {
					fmt.Fprintf(b, `\u%04x`, r)
				}
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}
