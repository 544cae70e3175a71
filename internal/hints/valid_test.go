package hints

import (
	"encoding/json"
	"testing"

	"kvrouter/internal/rawjson"
)

func BenchmarkValid(b *testing.B) {
	ids := make([]int, 1536)
	for i := range ids {
		ids[i] = i * 7919 % 150000
	}
	idsBody, _ := json.Marshal(map[string]any{"model": "m", "prompt": ids, "max_tokens": 1})
	for _, bc := range []struct {
		name string
		body []byte
	}{{"chat", benchBody(false)}, {"ids", idsBody}} {
		b.Run(bc.name+"/valid", func(b *testing.B) {
			b.SetBytes(int64(len(bc.body)))
			for b.Loop() {
				if !rawjson.Valid(bc.body) {
					b.Fatal("invalid")
				}
			}
		})
		b.Run(bc.name+"/json.Valid", func(b *testing.B) {
			b.SetBytes(int64(len(bc.body)))
			for b.Loop() {
				if !json.Valid(bc.body) {
					b.Fatal("invalid")
				}
			}
		})
	}
}
