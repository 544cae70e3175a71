package frontdoor

import (
	"encoding/json"
	"testing"
)

// FuzzUnmarshalString: the shortcut reads every valid JSON string as the
// decoder does.
func FuzzUnmarshalString(f *testing.F) {
	for _, s := range []string{`""`, `"hello world"`, `"a\"b"`, `"\u00e9t\u00e9"`, "\"\xff\xfe\"", `"naïve 東京 🍣"`, `"tab\there"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		var want string
		if !json.Valid([]byte(raw)) || json.Unmarshal([]byte(raw), &want) != nil || raw[0] != '"' || raw[len(raw)-1] != '"' {
			return // only string values of valid documents reach it, as members cuts them
		}
		var got string
		if err := unmarshalString(json.RawMessage(raw), &got); err != nil || got != want {
			t.Fatalf("%q: %q, %v; want %q", raw, got, err, want)
		}
	})
}
