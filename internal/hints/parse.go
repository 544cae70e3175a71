// This file holds a consumer's rules for a hint read into Go values, and the errors they raise.

package hints

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Errors a consumer branches on; each comes wrapped in a *FieldError that
// names the offending field.
var (
	ErrMalformed       = errors.New("hints: malformed hint")
	ErrNoFetchAction   = errors.New("hints: no kv.fetch action")
	ErrBadPayload      = errors.New("hints: bad kv.fetch payload")
	ErrBadSource       = errors.New("hints: bad source_control_endpoint")
	ErrBadBlockHashes  = errors.New("hints: bad block_hashes")
	ErrUnsupportedMode = errors.New("hints: unsupported mode")
)

// FieldError is a rejected hint, naming the field at fault.
type FieldError struct {
	Field string // path inside the hint, e.g. actions[0].payload.block_hashes[2]
	Err   error  // one of the sentinels above
	Msg   string
}

func (e *FieldError) Error() string { return "hints: " + e.Field + ": " + e.Msg }
func (e *FieldError) Unwrap() error { return e.Err }

// Parsed is a hint as a consumer accepted it.
type Parsed struct {
	Hint      Hint
	Flat      bool   // the legacy flat form
	MessageID string // envelope only; "" when absent or not a string
	// Warnings lists accepted deviations (version mismatches): a consumer
	// logs them but still honours the hint, as KVCR does.
	Warnings []string
}

// ParseValue reads a hint already decoded into Go values, from JSON with
// json.Decoder.UseNumber or from msgpack. Integers may be json.Number or any
// Go integer type; float64 is refused since a u64 hash may already have lost
// bits on its way there.
func ParseValue(v any) (Parsed, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return Parsed{}, &FieldError{Field: "hint", Err: ErrMalformed, Msg: fmt.Sprintf("want an object, got %s", kind(v))}
	}
	if acts, ok := m[keyActions]; ok {
		return parseEnvelope(m, acts)
	}
	_, hasSource := m[keySourceEndpoint]
	_, hasHashes := m[keyBlockHashes]
	if !hasSource && !hasHashes {
		return Parsed{}, &FieldError{Field: keyActions, Err: ErrNoFetchAction,
			Msg: "missing: neither a kv.fetch envelope nor a flat hint"}
	}
	h, err := parsePayload("", m)
	return Parsed{Hint: h, Flat: true}, err
}

func parseEnvelope(m map[string]any, acts any) (Parsed, error) {
	list, ok := acts.([]any)
	if !ok {
		return Parsed{}, &FieldError{Field: keyActions, Err: ErrMalformed, Msg: "want a list, got " + kind(acts)}
	}
	var p Parsed
	p.MessageID, _ = m[keyMessageID].(string)
	if v := m[keyProtocolVersion]; v != protocolVersion {
		p.Warnings = append(p.Warnings, fmt.Sprintf("%s is %s, want %q", keyProtocolVersion, describe(v), protocolVersion))
	}
	for i, a := range list {
		act, ok := a.(map[string]any)
		if !ok || act[keyActionType] != actionKVFetch {
			continue // unknown actions are for other consumers
		}
		field := fmt.Sprintf("%s[%d]", keyActions, i)
		if v := act[keyActionVersion]; v != actionVersion {
			p.Warnings = append(p.Warnings, fmt.Sprintf("%s.%s is %s, want %q", field, keyActionVersion, describe(v), actionVersion))
		}
		field += "." + keyPayload
		payload, ok := act[keyPayload].(map[string]any)
		if !ok {
			return Parsed{}, &FieldError{Field: field, Err: ErrBadPayload, Msg: "want an object, got " + kind(act[keyPayload])}
		}
		h, err := parsePayload(field+".", payload)
		if err != nil {
			return Parsed{}, err
		}
		p.Hint = h
		return p, nil
	}
	return Parsed{}, &FieldError{Field: keyActions, Err: ErrNoFetchAction, Msg: fmt.Sprintf("no %q action among %d", actionKVFetch, len(list))}
}

func parsePayload(prefix string, m map[string]any) (Hint, error) {
	src, ok := m[keySourceEndpoint].(string)
	if !ok || src == "" {
		msg := "want a non-empty string, got " + kind(m[keySourceEndpoint])
		if ok {
			msg = "empty"
		}
		return Hint{}, &FieldError{Field: prefix + keySourceEndpoint, Err: ErrBadSource, Msg: msg}
	}
	if mode, ok := m[keyMode]; ok && mode != modeCopy {
		return Hint{}, &FieldError{Field: prefix + keyMode, Err: ErrUnsupportedMode,
			Msg: fmt.Sprintf("%s is not supported, only %q", describe(mode), modeCopy)}
	}
	field := prefix + keyBlockHashes
	var hashes []uint64
	var err error
	switch list := m[keyBlockHashes].(type) {
	case []any:
		hashes, err = uniqueHashes(field, len(list), func(i int) (uint64, error) { return toUint64(list[i]) })
	case rawList:
		hashes, err = list.hashes(field)
	default:
		err = &FieldError{Field: field, Err: ErrBadBlockHashes, Msg: "want a non-empty list, got " + kind(list)}
	}
	if err != nil {
		return Hint{}, err
	}
	return Hint{Endpoint: src, BlockHashes: hashes}, nil
}

// uniqueHashes reads n hashes through at, keeping the first of duplicates:
// consumers use set membership, so order beyond that carries nothing.
func uniqueHashes(field string, n int, at func(int) (uint64, error)) ([]uint64, error) {
	if n == 0 {
		return nil, &FieldError{Field: field, Err: ErrBadBlockHashes, Msg: "empty"}
	}
	hashes := make([]uint64, 0, n)
	seen := make(map[uint64]struct{}, n)
	for i := range n {
		u, err := at(i)
		if err != nil {
			return nil, &FieldError{Field: fmt.Sprintf("%s[%d]", field, i), Err: ErrBadBlockHashes, Msg: err.Error()}
		}
		if _, dup := seen[u]; dup {
			continue
		}
		seen[u] = struct{}{}
		hashes = append(hashes, u)
	}
	return hashes, nil
}

func toUint64(x any) (uint64, error) {
	switch n := x.(type) {
	case json.Number:
		return parseDecimal(string(n))
	case uint64:
		return n, nil
	case uint:
		return uint64(n), nil
	case uint32:
		return uint64(n), nil
	case uint16:
		return uint64(n), nil
	case uint8:
		return uint64(n), nil
	case int64:
		return nonNegative(n)
	case int:
		return nonNegative(int64(n))
	case int32:
		return nonNegative(int64(n))
	case int16:
		return nonNegative(int64(n))
	case int8:
		return nonNegative(int64(n))
	}
	return 0, fmt.Errorf("%s, got %s", wantHash, kind(x))
}

const wantHash = "want an integer in [0, 2^64)"

// parseDecimal reads a JSON number as a hash.
func parseDecimal(s string) (uint64, error) {
	u, err := strconv.ParseUint(s, 10, 64)
	if err == nil {
		return u, nil
	}
	switch {
	case strings.HasPrefix(s, "-"):
		return 0, fmt.Errorf("%s, got negative %s", wantHash, s)
	case strings.ContainsAny(s, ".eE"):
		return 0, fmt.Errorf("%s, got float %s", wantHash, s)
	}
	return 0, fmt.Errorf("%s, got %s", wantHash, s)
}

func nonNegative(n int64) (uint64, error) {
	if n < 0 {
		return 0, fmt.Errorf("%s, got negative %d", wantHash, n)
	}
	return uint64(n), nil
}

// kind names a decoded value's JSON type for error messages.
func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "bool"
	case string:
		return "string"
	case json.Number, float64, float32:
		return "number"
	case []any, rawList:
		return "list"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// describe renders a value for a warning or an error.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "absent or null"
	case string:
		return strconv.Quote(x)
	}
	return kind(v)
}
