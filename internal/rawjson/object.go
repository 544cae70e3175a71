package rawjson

import (
	"bytes"
	"encoding/json"
)

// Member is one member of a JSON object: its key, decoded, and the text of
// its value.
type Member struct {
	Key   string
	Value []byte
}

// ScanObject validates b as exactly one JSON object, as Valid would, and
// appends its members to dst in order. take lets the caller read a value
// itself on the way: for the value starting at b[i] it returns the offset
// just past it, having checked it is valid JSON, or -1 to leave the value
// to ScanObject. A request body is thus read once even where the caller
// decodes its longest member (a prompt of token ids) anyway.
func ScanObject(dst []Member, b []byte, take func(key string, b []byte, i int) int) ([]Member, bool) {
	i := SkipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return dst, false
	}
	if i = SkipSpace(b, i+1); i < len(b) && b[i] == '}' {
		return dst, SkipSpace(b, i+1) == len(b)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return dst, false
		}
		end := scanString(b, i)
		if end < 0 {
			return dst, false
		}
		key := string(b[i+1 : end-1])
		if bytes.IndexByte(b[i:end], '\\') >= 0 {
			if json.Unmarshal(b[i:end], &key) != nil {
				return dst, false
			}
		}
		if i = SkipSpace(b, end); i >= len(b) || b[i] != ':' {
			return dst, false
		}
		v := SkipSpace(b, i+1)
		i = -1
		if take != nil && v < len(b) {
			i = take(key, b, v)
		}
		if i < 0 {
			i = ValidValue(b, v)
		}
		if i < 0 {
			return dst, false
		}
		dst = append(dst, Member{key, b[v:i]})
		switch i = SkipSpace(b, i); {
		case i >= len(b):
			return dst, false
		case b[i] == ',':
			i = SkipSpace(b, i+1)
		case b[i] == '}':
			return dst, SkipSpace(b, i+1) == len(b)
		default:
			return dst, false
		}
	}
}
