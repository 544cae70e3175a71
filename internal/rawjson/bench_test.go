package rawjson

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// benchBodies are the two request shapes the front door reads most: a
// chat of about 100 KB (200 turns of text with escaped quotes) and a
// completion of 1,536 token ids.
func benchBodies() []struct {
	name string
	body []byte
} {
	turns := make([]map[string]string, 200)
	for i := range turns {
		turns[i] = map[string]string{"role": "user", "content": fmt.Sprintf(`%s "quoted" turn %d`, strings.Repeat("lorem ipsum ", 40), i)}
	}
	chat, _ := json.Marshal(map[string]any{"model": "qwen3-32b", "messages": turns, "max_tokens": 256, "temperature": 0.7,
		"kv_transfer_params": map[string]any{"do_remote_prefill": false}})
	ids := make([]int, 1536)
	for i := range ids {
		ids[i] = i * 7919 % 150000
	}
	idsBody, _ := json.Marshal(map[string]any{"model": "m", "prompt": ids, "max_tokens": 1})
	return []struct {
		name string
		body []byte
	}{{"chat", chat}, {"ids", idsBody}}
}

// BenchmarkValid compares Valid with json.Valid, which every request body
// went through before.
func BenchmarkValid(b *testing.B) {
	for _, bc := range benchBodies() {
		b.Run(bc.name+"/rawjson", func(b *testing.B) {
			b.SetBytes(int64(len(bc.body)))
			for b.Loop() {
				if !Valid(bc.body) {
					b.Fatal("invalid")
				}
			}
		})
		b.Run(bc.name+"/encoding-json", func(b *testing.B) {
			b.SetBytes(int64(len(bc.body)))
			for b.Loop() {
				if !json.Valid(bc.body) {
					b.Fatal("invalid")
				}
			}
		})
	}
}

// BenchmarkMembers compares walking a body's top-level members with
// Members (the body already validated) and with encoding/json's nearest
// equivalent, a map of raw values, which validates as it goes.
func BenchmarkMembers(b *testing.B) {
	for _, bc := range benchBodies() {
		b.Run(bc.name+"/rawjson", func(b *testing.B) {
			b.SetBytes(int64(len(bc.body)))
			b.ReportAllocs()
			var buf [16]Member
			for b.Loop() {
				if ms, _ := Members(buf[:0], bc.body, 0); len(ms) < 3 {
					b.Fatal(ms)
				}
			}
		})
		b.Run(bc.name+"/encoding-json", func(b *testing.B) {
			b.SetBytes(int64(len(bc.body)))
			b.ReportAllocs()
			for b.Loop() {
				var m map[string]json.RawMessage
				if err := json.Unmarshal(bc.body, &m); err != nil || len(m) < 3 {
					b.Fatal(err)
				}
			}
		})
	}
}
