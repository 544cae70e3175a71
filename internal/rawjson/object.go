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
		key := intern(b[i+1 : end-1])
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

// intern returns b as a string, without allocating for the keys inference
// requests and answers carry: the router reads two objects per request and
// the usage object's, and their keys were a string allocation each.
func intern(b []byte) string {
	switch string(b) { // compiled to comparisons: no allocation
	case "model":
		return "model"
	case "prompt":
		return "prompt"
	case "messages":
		return "messages"
	case "stream":
		return "stream"
	case "stream_options":
		return "stream_options"
	case "max_tokens":
		return "max_tokens"
	case "temperature":
		return "temperature"
	case "id":
		return "id"
	case "object":
		return "object"
	case "created":
		return "created"
	case "choices":
		return "choices"
	case "usage":
		return "usage"
	case "prompt_tokens":
		return "prompt_tokens"
	case "completion_tokens":
		return "completion_tokens"
	case "total_tokens":
		return "total_tokens"
	case "prompt_tokens_details":
		return "prompt_tokens_details"
	case "cached_tokens":
		return "cached_tokens"
	case "kvrouter":
		return "kvrouter"
	case "peer_restored_tokens":
		return "peer_restored_tokens"
	}
	return string(b)
}
