// This file holds Parse: a hint read from JSON text, its hash lists scanned in place.

package hints

import (
	"bytes"
	"encoding/json"

	"kvrouter/internal/rawjson"
)

// Parse reads a hint as JSON: a kv.fetch envelope or the legacy flat form.
// Numbers are read exactly, never through float64.
//
// Decoding a whole hint into Go values costs two allocations per block
// hash, so Parse decodes only the fields the rules look at, leaves
// block_hashes as raw JSON read in place, and hands the result to
// ParseValue: one set of rules, applied to either input.
func Parse(data []byte) (Parsed, error) {
	if !rawjson.Valid(data) {
		return Parsed{}, &FieldError{Field: "hint", Err: ErrMalformed, Msg: "not JSON"}
	}
	data = bytes.TrimLeft(data, " \t\r\n")
	if data[0] != '{' {
		return ParseValue(decodeValue(data))
	}
	top := rawObject(data)
	v := make(map[string]any, 4)
	for _, k := range []string{keyProtocolVersion, keyMessageID, keySourceEndpoint, keyMode} {
		if raw, ok := top[k]; ok {
			v[k] = decodeValue(raw)
		}
	}
	if raw, ok := top[keyBlockHashes]; ok {
		v[keyBlockHashes] = listOrValue(raw)
	}
	if raw, ok := top[keyActions]; ok {
		v[keyActions] = actions(raw)
	}
	return ParseValue(v)
}

// actions keeps what ParseValue reads of the actions list: up to the first
// kv.fetch, each action's type, version and payload.
func actions(raw json.RawMessage) any {
	if raw[0] != '[' {
		return decodeValue(raw)
	}
	elems, _ := rawjson.Elements(nil, raw, 0)
	out := make([]any, 0, len(elems))
	for _, a := range elems {
		if a[0] != '{' {
			out = append(out, nil)
			continue
		}
		m := rawObject(a)
		act := map[string]any{}
		if t, ok := m[keyActionType]; ok {
			act[keyActionType] = decodeValue(t)
		}
		out = append(out, act)
		if act[keyActionType] != actionKVFetch {
			continue
		}
		if v, ok := m[keyActionVersion]; ok {
			act[keyActionVersion] = decodeValue(v)
		}
		if p, ok := m[keyPayload]; ok {
			act[keyPayload] = payload(p)
		}
		break
	}
	return out
}

func payload(raw json.RawMessage) any {
	if raw[0] != '{' {
		return decodeValue(raw)
	}
	m := rawObject(raw)
	out := make(map[string]any, 3)
	for _, k := range []string{keySourceEndpoint, keyMode} {
		if v, ok := m[k]; ok {
			out[k] = decodeValue(v)
		}
	}
	if v, ok := m[keyBlockHashes]; ok {
		out[keyBlockHashes] = listOrValue(v)
	}
	return out
}

func listOrValue(raw json.RawMessage) any {
	if raw[0] == '[' {
		return rawList(raw)
	}
	return decodeValue(raw)
}

// rawObject splits a JSON object already known valid into its members,
// without copying them. Duplicate keys keep the last value, as Python's
// json does.
func rawObject(raw []byte) map[string]json.RawMessage {
	ms, _ := rawjson.Members(nil, raw, 0)
	m := make(map[string]json.RawMessage, len(ms))
	for _, x := range ms {
		m[x.Key] = x.Value
	}
	return m
}

// decodeValue decodes valid JSON with exact numbers.
func decodeValue(raw []byte) any {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	_ = dec.Decode(&v)
	return v
}

// rawList is a valid JSON list left undecoded.
type rawList []byte

// hashes reads the list's elements as hashes in place, without an
// allocation per element.
func (l rawList) hashes(field string) ([]uint64, error) {
	// A list of hashes holds no nested commas: counting them sizes the
	// list in one vectorised pass.
	elems, _ := rawjson.Elements(make([][]byte, 0, bytes.Count(l, []byte{','})+1), l, 0)
	return uniqueHashes(field, len(elems), func(i int) (uint64, error) {
		return rawHash(elems[i])
	})
}

// rawHash reads one JSON value as a hash with toUint64's rules and
// messages.
func rawHash(e []byte) (uint64, error) {
	if len(e) <= 20 {
		var u uint64
		ok := true
		for _, c := range e {
			d := uint64(c - '0')
			if d > 9 || u > (1<<64-1-d)/10 {
				ok = false
				break
			}
			u = u*10 + d
		}
		if ok {
			return u, nil
		}
	}
	switch e[0] {
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return parseDecimal(string(e))
	}
	return toUint64(decodeValue(e))
}
