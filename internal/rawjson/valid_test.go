package rawjson

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// validCases are edge cases of the grammar and the nesting limit.
var validCases = []string{
	``, ` `, `{}`, `[]`, ` { } `, `[ ]`, `{"a":1}`, `{"a":1,}`, `{"a" 1}`, `{a:1}`, `{"a":}`, `[1,]`, `[,1]`, `[1 2]`,
	`0`, `-0`, `01`, `-`, `1.`, `1.5`, `.5`, `1e5`, `1E+5`, `1e-5`, `1e`, `1e+`, `-1.5e10`, `1.5.5`, `+1`,
	`true`, `false`, `null`, `tru`, `truex`, `nul`, `True`, `"a"`, `"a`, `"\"`, `"\\"`, `"\/\b\f\n\r\t"`, `"\u00e9"`,
	`"\u00g9"`, `"\u00"`, `"\x"`, "\"\x01\"", "\"\x1f\"", "\"\x7f\"", "\"\xff\xfe\"", "\"é\"", `"a""b"`, `1 2`, `[1]]`,
	`{"a":[1,{"b":null}],"c":"d"}`, `[[[[]]]]`, `[[[[]]]`, `{"a":{"b":{}}}}`, "\t\n\r [1]\r\n", `{"a":1 "b":2}`,
	`{"":""}`, `[""]`, `["` + strings.Repeat("abcdefgh", 9) + `"]`, `["` + strings.Repeat("abcdefg\"", 3) + `"]`,
	strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth),
	strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1),
	strings.Repeat(`{"a":`, maxDepth) + "1" + strings.Repeat("}", maxDepth),
	strings.Repeat(`{"a":`, maxDepth+1) + "1" + strings.Repeat("}", maxDepth+1),
}

// TestValid: valid agrees with json.Valid on edge cases and on random
// mutations of JSON documents.
func TestValid(t *testing.T) {
	for _, c := range validCases {
		if got, want := Valid([]byte(c)), json.Valid([]byte(c)); got != want {
			t.Errorf("Valid(%.80q) = %v, json.Valid says %v", c, got, want)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte(`{}[],:"\ 0123456789-+.eEtruefalsnl` + "\t\n\x01\xc3\xa9u")
	seeds := []string{`{"model":"m","messages":[{"role":"user","content":"hello \"world\""}],"stream":true,"kv_hints":{"actions":[]}}`, `{"model":"m","prompt":[1,2,3],"kv_transfer_params":{"kv_hint":null}}`,
		`[1.5e3,-0,"a\u00e9\n",true,false,null,{"x":[{}]}]`}
	for n := range 20000 {
		b := []byte(seeds[n%len(seeds)])
		if len(b) > 300 {
			start := rng.IntN(len(b) - 200)
			b = b[start : start+rng.IntN(200)]
		}
		for range 1 + rng.IntN(3) {
			if len(b) == 0 {
				break
			}
			switch k := rng.IntN(len(b)); rng.IntN(3) {
			case 0:
				b[k] = alphabet[rng.IntN(len(alphabet))]
			case 1:
				b = append(b[:k], b[k+1:]...)
			default:
				b = append(b[:k], append([]byte{alphabet[rng.IntN(len(alphabet))]}, b[k:]...)...)
			}
		}
		if got, want := Valid(b), json.Valid(b); got != want {
			t.Fatalf("Valid(%q) = %v, json.Valid says %v", b, got, want)
		}
	}
}

func FuzzValid(f *testing.F) {
	for _, c := range validCases[:len(validCases)-4] {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := Valid(b), json.Valid(b); got != want {
			t.Fatalf("Valid(%q) = %v, json.Valid says %v", b, got, want)
		}
	})
}

// FuzzScanObject: ScanObject accepts exactly the JSON objects, and finds
// the members encoding/json does (the last of duplicate keys winning).
func FuzzScanObject(f *testing.F) {
	for _, c := range []string{`{}`, ` {"a":1, "b" : [1,2,{"c":"d"}], "\u0061":null} `, `{"a":1,}`, `{"a" 1}`, `[1]`, `{"a":1}x`, `{"a":"\q"}`,
		`{"model":"m","usage":{"prompt_tokens":1,"prompt_tokens_details":null},"kvrouter":2,"\u0075sage":3,"usag":4}`} {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ms, ok := ScanObject(nil, b, nil)
		var want map[string]json.RawMessage
		wantOK := json.Valid(b) && json.Unmarshal(b, &want) == nil && want != nil
		if ok != wantOK {
			t.Fatalf("ScanObject(%q) ok = %v, encoding/json says %v", b, ok, wantOK)
		}
		if !ok {
			return
		}
		// Members, walking the object without checking it, finds the
		// same members at the same places.
		again, closing := Members(nil, b, SkipSpace(b, 0))
		same := func(x, y Member) bool {
			return x.Key == y.Key && string(x.Value) == string(y.Value) && x.Start == y.Start && x.End == y.End
		}
		if !slices.EqualFunc(again, ms, same) || SkipSpace(b, closing+1) != len(b) || b[closing] != '}' {
			t.Fatalf("Members(%q) = %+v closing at %d, ScanObject found %+v", b, again, closing, ms)
		}
		for _, m := range ms {
			if b[m.Start] != '"' || string(b[m.End-len(m.Value):m.End]) != string(m.Value) {
				t.Fatalf("ScanObject(%q): member %+v is not where it says", b, m)
			}
		}
		got := map[string]string{}
		for _, m := range ms {
			if !utf8.ValidString(m.Key) {
				return // encoding/json names such a key with U+FFFD; callers match ASCII keys
			}
			got[m.Key] = string(m.Value)
		}
		if len(got) != len(want) {
			t.Fatalf("ScanObject(%q): %d keys, want %d", b, len(got), len(want))
		}
		for k, v := range want {
			if got[k] != string(v) {
				t.Fatalf("ScanObject(%q)[%q] = %s, want %s", b, k, got[k], v)
			}
		}
	})
}

// FuzzElements: Elements finds the elements encoding/json does, as written.
func FuzzElements(f *testing.F) {
	for _, c := range []string{`[]`, ` [ ] `, `[1]`, `[1, "a,]", [2,[3]], {"b":[4]}, null ]`, `[1,2,3]`, `["\"]"]`} {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want []json.RawMessage
		if !json.Valid(b) || json.Unmarshal(b, &want) != nil || want == nil {
			return
		}
		got, closing := Elements(nil, b, SkipSpace(b, 0))
		if len(got) != len(want) || b[closing] != ']' || SkipSpace(b, closing+1) != len(b) {
			t.Fatalf("Elements(%q) = %q closing at %d, want %q", b, got, closing, want)
		}
		for i := range want {
			if string(got[i]) != string(want[i]) {
				t.Fatalf("Elements(%q)[%d] = %s, want %s", b, i, got[i], want[i])
			}
		}
	})
}
