package gateway

import (
	"encoding/json"
	"fmt"
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

// setMember drops every top-level member named key and appends key with
// value (raw JSON). A repeated key would leave the engine to pick one, and
// Python's json keeps the last: appending makes ours the one it keeps.
func setMember(body []byte, key string, value []byte) ([]byte, error) {
	if !json.Valid(body) {
		return nil, fmt.Errorf("%w: body is not valid JSON", ErrBadRequest)
	}
	open := skipSpace(body, 0)
	if body[open] != '{' {
		return nil, fmt.Errorf("%w: want a JSON object", ErrBadRequest)
	}
	out := make([]byte, 0, len(body)+len(key)+len(value)+8)
	out = append(out, body[:open+1]...)
	kept := 0
	i := skipSpace(body, open+1)
	for body[i] != '}' {
		start := i
		end := skipString(body, i)
		var k string
		_ = json.Unmarshal(body[start:end], &k) // unescapes "\u006dodel" too
		i = skipSpace(body, end)
		i = skipSpace(body, i+1) // the colon
		i = skipValue(body, i)
		if k != key {
			if kept > 0 {
				out = append(out, ',')
			}
			out = append(out, body[start:i]...)
			kept++
		}
		i = skipSpace(body, i)
		if body[i] == ',' {
			i = skipSpace(body, i+1)
		}
	}
	if kept > 0 {
		out = append(out, ',')
	}
	k, _ := json.Marshal(key) // a string always marshals
	out = append(out, k...)
	out = append(out, ':')
	out = append(out, value...)
	out = append(out, '}')
	return append(out, body[i+1:]...), nil
}

// withUsage asks the engine to end a stream with a usage chunk, keeping the
// client's other stream options.
func withUsage(body []byte) ([]byte, error) {
	var w struct {
		StreamOptions json.RawMessage `json:"stream_options"`
	}
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	opts := map[string]json.RawMessage{}
	if len(w.StreamOptions) > 0 && !isNull(w.StreamOptions) {
		if err := json.Unmarshal(w.StreamOptions, &opts); err != nil {
			return nil, fmt.Errorf("%w: stream_options: want an object", ErrBadRequest)
		}
	}
	opts[keyIncludeUsage] = json.RawMessage("true")
	v, err := json.Marshal(opts)
	if err != nil {
		return nil, err
	}
	return setMember(body, keyStreamOptions, v)
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the offset just past the string opening at b[i]; b is
// valid JSON.
func skipString(b []byte, i int) int {
	for i++; ; i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
}

// skipValue returns the offset just past the value starting at b[i]; b is
// valid JSON.
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; ; i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
	}
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}
