// This file holds the object walkers: Members in place, and ScanObject that validates as it goes.

package rawjson

import (
	"bytes"
	"encoding/json"
)

// Member is one member of a JSON object: its key, decoded, the text of its
// value, and where the member stands in the scanned text, for callers that
// rewrite the object around it.
type Member struct {
	Key   string
	Value []byte
	Start int // the offset of the key's opening quote
	End   int // the offset just past the value
}

// Members appends to dst the members of the object opening at b[open] and
// returns them with the offset of its closing brace. b must be valid JSON
// (Valid, or ScanObject, said so): nothing is checked again, so a body is
// validated once however many times it is walked.
func Members(dst []Member, b []byte, open int) ([]Member, int) {
	i := SkipSpace(b, open+1)
	if b[i] == '}' {
		return dst, i
	}
	for {
		start, end := i, SkipString(b, i)
		i = SkipSpace(b, end)
		v := SkipSpace(b, i+1) // past the colon
		i = SkipValue(b, v)
		dst = append(dst, Member{Key: key(b[start:end]), Value: b[v:i], Start: start, End: i})
		if i = SkipSpace(b, i); b[i] == '}' {
			return dst, i
		}
		i = SkipSpace(b, i+1) // past the comma
	}
}

// key decodes a valid quoted key. An escaped key must match like the plain
// one: a client could spell kv_hints "kv\u005fhints" to smuggle a hint past
// whoever strips them.
func key(q []byte) string {
	if bytes.IndexByte(q, '\\') < 0 {
		return intern(q[1 : len(q)-1])
	}
	var k string
	_ = json.Unmarshal(q, &k) // valid JSON: cannot fail
	return k
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
		start, k := i, key(b[i:end])
		if i = SkipSpace(b, end); i >= len(b) || b[i] != ':' {
			return dst, false
		}
		v := SkipSpace(b, i+1)
		i = -1
		if take != nil && v < len(b) {
			i = take(k, b, v)
		}
		if i < 0 {
			i = ValidValue(b, v)
		}
		if i < 0 {
			return dst, false
		}
		dst = append(dst, Member{Key: k, Value: b[v:i], Start: start, End: i})
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
	case "role":
		return "role"
	case "content":
		return "content"
	case "kv_transfer_params":
		return "kv_transfer_params"
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
