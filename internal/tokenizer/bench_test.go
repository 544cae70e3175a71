package tokenizer

import (
	"bytes"
	"os"
	"testing"
)

func benchText(b *testing.B) string {
	data, err := os.ReadFile("testdata/bench-en.txt")
	if err != nil {
		b.Fatal(err)
	}
	return string(data)
}

// BenchmarkEncode encodes about 10k characters of English prose with the
// default tokenizer, word cache warm as in a running router.
func BenchmarkEncode(b *testing.B) {
	text, tok := benchText(b), Default()
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		tok.Encode(text, false)
	}
}

// BenchmarkEncodeCold is BenchmarkEncode with an empty word cache every
// time: the cost of text whose words were never seen.
func BenchmarkEncodeCold(b *testing.B) {
	text, tok := benchText(b), *Default()
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		model := *tok.model
		model.cache, model.short = newWordCache(), new(shortCache)
		tok.model = &model
		tok.Encode(text, false)
	}
}

func BenchmarkEncodeParallel(b *testing.B) {
	text, tok := benchText(b), Default()
	b.SetBytes(int64(len(text)))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tok.Encode(text, false)
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	text, tok := benchText(b), Default()
	ids := tok.Encode(text, false)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		tok.Decode(ids)
	}
}

// BenchmarkEncodeQwen3Prompt encodes a 1,536-token English prompt with
// the real Qwen3 tokenizer (151k vocabulary), word cache warm: the cost on
// a routed request's path.
func BenchmarkEncodeQwen3Prompt(b *testing.B) {
	tok, err := Load(bytes.NewReader(realTokenizerJSON(b, "qwen3")))
	if err != nil {
		b.Fatal(err)
	}
	text := benchText(b)
	ids := tok.Encode(text, false)
	if len(ids) < 1536 {
		b.Fatalf("bench text has %d tokens, want at least 1536", len(ids))
	}
	prompt := tok.Decode(ids[:1536])
	if n := len(tok.Encode(prompt, false)); n < 1530 || n > 1542 {
		b.Fatalf("prompt re-encodes to %d tokens", n)
	}
	b.SetBytes(int64(len(prompt)))
	b.ReportAllocs()
	loopCPU(b, func() { tok.Encode(prompt, false) })
}
