// This file holds the embedded demo tokenizer of the simulated fleet.

package tokenizer

import (
	"bytes"
	_ "embed"
	"sync"
)

// demoJSON is a small byte-level BPE tokenizer (256 byte tokens, merges
// learned from an English sample, the Qwen2 pre-tokenizer, and the chatml
// and llama3 markers as special tokens). It is fixed data: its merges were
// learned once, most frequent adjacent pair first, from 7 KB of English
// prose about KV-cache routing (526 merges, every pair seen at least
// twice), and nothing regenerates the file; TestDefault pins what it must
// do.
//
//go:embed kvrouter-demo.json
var demoJSON []byte

var loadDefault = sync.OnceValue(func() *Tokenizer {
	t, err := Load(bytes.NewReader(demoJSON))
	if err != nil {
		panic("tokenizer: the embedded kvrouter-demo tokenizer does not load: " + err.Error())
	}
	return t
})

// Default returns the embedded "kvrouter-demo" tokenizer, which the
// simulated engine and the router share when no model tokenizer is
// configured. It pairs with the "chatml" chat template.
func Default() *Tokenizer { return loadDefault() }

var loadDemo = sync.OnceValue(func() *Model {
	chat, err := BuiltinChatTemplate("chatml")
	if err != nil {
		panic("tokenizer: " + err.Error())
	}
	return &Model{Tok: Default(), Chat: chat}
})

// Demo returns the embedded demo tokenizer as a model with the chatml
// format: the model of the simulated fleet (`kvrouter mocker` with its
// defaults, `kvrouter demo`), which a router in front of it names with
// --tokenizer demo. It must not be modified.
func Demo() *Model { return loadDemo() }
