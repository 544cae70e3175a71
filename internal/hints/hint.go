// This file holds the Hint and its JSON writing: the kv.fetch@1.0 envelope and the flat form.

package hints

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// Hint tells a target which peer to pull which blocks from.
type Hint struct {
	Endpoint    string   // source_control_endpoint
	BlockHashes []uint64 // engine block hashes; consumers use set membership
}

// check applies the rules a consumer enforces, so that we never send what a
// runner would refuse.
func (h Hint) check() error {
	if h.Endpoint == "" {
		return &FieldError{Field: keySourceEndpoint, Err: ErrBadSource, Msg: "empty"}
	}
	if len(h.BlockHashes) == 0 {
		return &FieldError{Field: keyBlockHashes, Err: ErrBadBlockHashes, Msg: "empty"}
	}
	return nil
}

// AppendEnvelope appends h as a kv.fetch@1.0 envelope for request messageID,
// byte for byte in the key order of docs/wire.md §6.3. Hand-written rather than
// json.Marshal'ed so that the order is fixed and hashes stay exact u64
// decimals.
func AppendEnvelope(dst []byte, messageID string, h Hint) []byte {
	dst = append(dst, '{')
	dst = appendKey(dst, keyProtocolVersion)
	dst = appendString(dst, protocolVersion)
	dst = append(dst, ',')
	dst = appendKey(dst, keyMessageID)
	dst = appendString(dst, messageID)
	dst = append(dst, ',')
	dst = appendKey(dst, keyActions)
	dst = append(dst, '[', '{')
	dst = appendKey(dst, keyActionID)
	dst = appendString(dst, firstActionID)
	dst = append(dst, ',')
	dst = appendKey(dst, keyActionType)
	dst = appendString(dst, actionKVFetch)
	dst = append(dst, ',')
	dst = appendKey(dst, keyActionVersion)
	dst = appendString(dst, actionVersion)
	dst = append(dst, ',')
	dst = appendKey(dst, keyPayload)
	dst = AppendFlat(dst, h)
	return append(dst, '}', ']', '}')
}

// AppendFlat appends h in the legacy flat form, which is also the envelope's
// payload.
func AppendFlat(dst []byte, h Hint) []byte {
	dst = append(dst, '{')
	dst = appendKey(dst, keySourceEndpoint)
	dst = appendString(dst, h.Endpoint)
	dst = append(dst, ',')
	dst = appendKey(dst, keyBlockHashes)
	dst = append(dst, '[')
	for i, b := range h.BlockHashes {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendUint(dst, b, 10)
	}
	return append(dst, ']', '}')
}

func appendKey(dst []byte, k string) []byte {
	return append(appendString(dst, k), ':')
}

// appendString appends s as a JSON string. It leaves <, > and & alone
// (json.Marshal would escape them) since hints never reach HTML.
func appendString(dst []byte, s string) []byte {
	if !utf8.ValidString(s) {
		// Rare enough to take the slow path; json.Marshal substitutes
		// U+FFFD for invalid bytes.
		b, _ := json.Marshal(s)
		return append(dst, b...)
	}
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
