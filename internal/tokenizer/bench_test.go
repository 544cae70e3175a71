package tokenizer

import (
	"bytes"
	"os"
	"strconv"
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

// qwen3Prompt returns the Qwen3 tokenizer and a 1,536-token English
// prompt.
func qwen3Prompt(b *testing.B) (*Tokenizer, string) {
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
	return tok, prompt
}

// BenchmarkEncodeQwen3Prompt encodes a 1,536-token English prompt with
// the real Qwen3 tokenizer (151k vocabulary), word cache warm, prefix
// cache off: the cost of a prompt that shares nothing with earlier ones.
func BenchmarkEncodeQwen3Prompt(b *testing.B) {
	tok, prompt := qwen3Prompt(b)
	tok = tok.WithoutPrefixCache()
	b.SetBytes(int64(len(prompt)))
	b.ReportAllocs()
	loopCPU(b, func() { tok.Encode(prompt, false) })
}

// BenchmarkEncodeQwen3PromptShared is BenchmarkEncodeQwen3Prompt through
// the prefix cache for prompts that share their first five sixths (a
// system prompt and earlier turns) and differ in the rest, as the turns of
// a conversation do: each has a new number at the start of its last sixth
// (building it is counted).
func BenchmarkEncodeQwen3PromptShared(b *testing.B) {
	tok, prompt := qwen3Prompt(b)
	shared, rest := prompt[:len(prompt)*5/6], prompt[len(prompt)*5/6:]
	tok.Encode(shared, false)
	b.SetBytes(int64(len(prompt)))
	b.ReportAllocs()
	i := 0
	loopCPU(b, func() {
		i++
		tok.Encode(shared+" "+strconv.Itoa(i)+rest, false)
	})
}

// BenchmarkEncodeQwen3PromptNew is BenchmarkEncodeQwen3Prompt through the
// prefix cache for prompts that share nothing (each starts with a new
// number): what the cache costs when it never hits.
func BenchmarkEncodeQwen3PromptNew(b *testing.B) {
	tok, prompt := qwen3Prompt(b)
	b.SetBytes(int64(len(prompt)))
	b.ReportAllocs()
	i := 0
	loopCPU(b, func() {
		i++
		tok.Encode(strconv.Itoa(i)+" "+prompt, false)
	})
}
