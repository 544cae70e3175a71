// This file holds the edits of forwarded bodies: members set, the rest kept byte for byte.

package frontdoor

import (
	"encoding/json"
	"fmt"
	"slices"
	"unicode/utf8"

	"kvrouter/internal/rawjson"
)

// Body edits keep everything the client wrote byte for byte (engines are
// picky about numbers and unknown keys alike) and only touch the members
// the router owns.

// Wire names the router writes into forwarded bodies and headers.
const (
	keyDataParallelRank = "data_parallel_rank" // SGLang
	keyStreamOptions    = "stream_options"
	keyIncludeUsage     = "include_usage"

	headerDPRank     = "x-kvrouter-dp-rank"
	headerVLLMDPRank = "X-data-parallel-rank" // vLLM
	headerTarget     = "x-kvrouter-target"
	headerWorker     = "x-kvrouter-worker"
	headerRequestID  = "X-Request-Id"
)

// member is a top-level member to set: key and raw JSON value.
type member struct {
	key   string
	value []byte
}

// setMember drops every top-level member named key and appends key with
// value (raw JSON). A repeated key would leave the engine to pick one, and
// Python's json keeps the last: appending makes ours the one it keeps.
func setMember(body []byte, key string, value []byte) ([]byte, error) {
	if err := checkObject(body); err != nil {
		return nil, err
	}
	return editMembers(nil, body, member{key, value}), nil
}

func checkObject(body []byte) error {
	if !rawjson.Valid(body) {
		return fmt.Errorf("%w: body is not valid JSON", ErrBadRequest)
	}
	if body[rawjson.SkipSpace(body, 0)] != '{' {
		return fmt.Errorf("%w: want a JSON object", ErrBadRequest)
	}
	return nil
}

// editMembers is setMember for several members on a body already known to
// be a valid JSON object (large prompts make every validation pass count),
// writing the result over dst's memory.
func editMembers(dst, body []byte, set ...member) []byte {
	return rewriteMembers(dst, body, keepAll, set)
}

// keepAll drops no member.
func keepAll(string) bool { return false }

// setSize bounds what set adds to a body.
func setSize(set []member) int {
	n := 0
	for _, m := range set {
		n += len(m.key) + len(m.value) + 8
	}
	return n
}

// appendSet writes set's members after n members already written.
func appendSet(out []byte, n int, set []member) []byte {
	for _, m := range set {
		if n > 0 {
			out = append(out, ',')
		}
		out = append(appendKey(out, m.key), ':')
		out = append(out, m.value...)
		n++
	}
	return out
}

// appendKey writes k as a JSON string: the router's own keys, plain ASCII,
// between quotes as they are, without the encoder's allocation.
func appendKey(out []byte, k string) []byte {
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < ' ' || c >= utf8.RuneSelf || c == '"' || c == '\\' {
			b, _ := json.Marshal(k) // a string always marshals
			return append(out, b...)
		}
	}
	return append(append(append(out, '"'), k...), '"')
}

// appendMembers adds set's members to a valid JSON object of n members
// that holds none of their keys, before its closing brace, writing the
// result over dst's memory.
func appendMembers(dst, body []byte, n int, set []member) []byte {
	end := len(body) - 1
	for body[end] != '}' { // trailing whitespace
		end--
	}
	out := slices.Grow(dst[:0], len(body)+setSize(set))
	out = appendSet(append(out, body[:end]...), n, set)
	return append(out, body[end:]...)
}

// setsKey reports whether key is one of set's keys.
func setsKey(set []member, key string) bool {
	for _, m := range set {
		if m.key == key {
			return true
		}
	}
	return false
}

// topMember returns the value of the last top-level member named key in a
// body known to be a valid JSON object, nil when there is none.
func topMember(body []byte, key string) []byte {
	var buf [16]rawjson.Member
	ms, _ := rawjson.Members(buf[:0], body, rawjson.SkipSpace(body, 0))
	return lastMember(ms, key)
}

// usageOptions is the stream_options value asking for a usage chunk,
// keeping the client's other options (so: the client's value, if any).
func usageOptions(so []byte) ([]byte, error) {
	if len(so) == 0 || isNull(so) {
		return []byte(`{"include_usage":true}`), nil
	}
	opts := map[string]json.RawMessage{}
	if err := json.Unmarshal(so, &opts); err != nil {
		return nil, fmt.Errorf("%w: stream_options: want an object", ErrBadRequest)
	}
	opts[keyIncludeUsage] = json.RawMessage("true")
	return json.Marshal(opts)
}

// withUsage asks the engine to end a stream with a usage chunk.
func withUsage(body []byte) ([]byte, error) {
	if err := checkObject(body); err != nil {
		return nil, err
	}
	so := topMember(body, keyStreamOptions)
	v, err := usageOptions(so)
	if err != nil {
		return nil, err
	}
	return editMembers(nil, body, member{keyStreamOptions, v}), nil
}
