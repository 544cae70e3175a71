// This file holds the reading of a JSON string value without the decoder
// when it needs no unescaping: a text prompt is most of a request's bytes.

package frontdoor

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// unmarshalString is json.Unmarshal into *dst for raw, a string of a valid
// document. Without escapes and with valid UTF-8 its contents are the
// string; the decoder validated the whole value again and copied it byte
// by byte, as much CPU as tokenizing it.
func unmarshalString(raw json.RawMessage, dst *string) error {
	if len(raw) >= 2 && raw[0] == '"' && bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		*dst = string(raw[1 : len(raw)-1])
		return nil
	}
	return json.Unmarshal(raw, dst)
}
