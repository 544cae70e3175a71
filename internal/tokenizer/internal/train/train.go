// Package train learns byte-level BPE merges from a text and writes the
// "kvrouter-demo" tokenizer.json that the tokenizer package embeds. It is
// deterministic: the same text and options give the same bytes, which a
// test checks against the committed file.
package train

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"kvrouter/internal/tokenizer/internal/pretok"
)

// Sample is the English text the demo tokenizer is trained on.
//
//go:embed sample.txt
var Sample string

// Merge is a learned merge, as raw bytes.
type Merge struct{ A, B string }

// Learn returns up to n merges learned from text pre-tokenized with p, in
// the order learned. Each step merges the most frequent adjacent pair of
// symbols, ties broken by the byte order of the pair, and learning stops
// early when no pair occurs minCount times.
func Learn(text string, p *pretok.Pattern, n, minCount int) []Merge {
	counts := make(map[string]int)
	for _, w := range p.Split(nil, text) {
		counts[w]++
	}
	type word struct {
		syms  []string
		count int
	}
	words := make([]word, 0, len(counts))
	for w, c := range counts {
		syms := make([]string, len(w))
		for i := range len(w) {
			syms[i] = w[i : i+1]
		}
		words = append(words, word{syms, c})
	}
	// Map order must not leak into the result.
	sort.Slice(words, func(i, j int) bool { return strings.Join(words[i].syms, "") < strings.Join(words[j].syms, "") })

	var merges []Merge
	for len(merges) < n {
		pairs := make(map[Merge]int)
		for _, w := range words {
			for i := 0; i+1 < len(w.syms); i++ {
				pairs[Merge{w.syms[i], w.syms[i+1]}] += w.count
			}
		}
		var best Merge
		bestCount := 0
		for m, c := range pairs {
			if c > bestCount || c == bestCount && (m.A < best.A || m.A == best.A && m.B < best.B) {
				best, bestCount = m, c
			}
		}
		if bestCount < minCount {
			break
		}
		merges = append(merges, best)
		for k := range words {
			words[k].syms = apply(words[k].syms, best)
		}
	}
	return merges
}

// apply merges the non-overlapping occurrences of m, left to right.
func apply(syms []string, m Merge) []string {
	out := syms[:0]
	for i := 0; i < len(syms); i++ {
		if i+1 < len(syms) && syms[i] == m.A && syms[i+1] == m.B {
			out = append(out, m.A+m.B)
			i++
			continue
		}
		out = append(out, syms[i])
	}
	return out
}

// Segment returns the symbols that learning left w in: the merges applied
// in order, each to every occurrence.
func Segment(w string, merges []Merge) []string {
	syms := make([]string, len(w))
	for i := range len(w) {
		syms[i] = w[i : i+1]
	}
	for _, m := range merges {
		syms = apply(syms, m)
	}
	return syms
}

// Demo settings. Changing any of them changes the committed file.
const (
	DemoMerges   = 1000
	DemoMinCount = 2
)

// DemoSpecial lists the added tokens of the demo tokenizer: the markers of
// the chatml and llama3 chat formats, and Qwen3's thinking tags, which are
// added but not special.
var DemoSpecial = []struct {
	Content string
	Special bool
}{
	{"<|endoftext|>", true},
	{"<|im_start|>", true},
	{"<|im_end|>", true},
	{"<|begin_of_text|>", true},
	{"<|start_header_id|>", true},
	{"<|end_header_id|>", true},
	{"<|eot_id|>", true},
	{"<think>", false},
	{"</think>", false},
}

// DemoJSON returns the kvrouter-demo tokenizer.json: byte-level BPE with the
// Qwen2 pre-tokenizer, learned from Sample.
func DemoJSON() []byte {
	return BuildJSON(Learn(Sample, pretok.Qwen2, DemoMerges, DemoMinCount))
}

// BuildJSON writes a byte-level tokenizer.json with the 256 byte tokens
// (id = byte value), one token per merge, and the DemoSpecial tokens.
func BuildJSON(merges []Merge) []byte {
	vocab := make(map[string]int)
	var order []string
	add := func(raw string) int {
		if id, ok := vocab[raw]; ok {
			return id
		}
		vocab[raw] = len(order)
		order = append(order, raw)
		return len(order) - 1
	}
	for b := range 256 {
		add(string([]byte{byte(b)}))
	}
	for _, m := range merges {
		add(m.A + m.B)
	}

	var w bytes.Buffer
	w.WriteString("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [\n")
	for i, s := range DemoSpecial {
		fmt.Fprintf(&w, "    {\"id\": %d, \"content\": %s, \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": %t}",
			len(order)+i, quote(s.Content), s.Special)
		w.WriteString(sep(i, len(DemoSpecial)))
	}
	w.WriteString("  ],\n  \"normalizer\": null,\n")
	fmt.Fprintf(&w, "  \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": %s}, \"behavior\": \"Isolated\", \"invert\": false}, %s]},\n",
		quote(pretok.Qwen2.Source()), byteLevelJSON)
	fmt.Fprintf(&w, "  \"post_processor\": %s,\n  \"decoder\": %s,\n", byteLevelJSON, byteLevelJSON)
	w.WriteString("  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n    \"fuse_unk\": false,\n    \"byte_fallback\": false,\n    \"ignore_merges\": false,\n    \"vocab\": {\n")
	for id, raw := range order {
		fmt.Fprintf(&w, "      %s: %d%s", quote(mapped(raw)), id, sep(id, len(order)))
	}
	w.WriteString("    },\n    \"merges\": [\n")
	for i, m := range merges {
		fmt.Fprintf(&w, "      [%s, %s]%s", quote(mapped(m.A)), quote(mapped(m.B)), sep(i, len(merges)))
	}
	w.WriteString("    ]\n  }\n}\n")
	return w.Bytes()
}

const byteLevelJSON = `{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}`

func sep(i, n int) string {
	if i == n-1 {
		return "\n"
	}
	return ",\n"
}

func mapped(raw string) string { return string(pretok.AppendEncoded(nil, raw)) }

// quote is JSON string quoting without Go's HTML escaping, which would
// turn "<|im_end|>" into "\u003c|im_end|\u003e".
func quote(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		panic(err) // strings always encode
	}
	return strings.TrimSuffix(b.String(), "\n")
}
