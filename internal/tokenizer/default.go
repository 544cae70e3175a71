package tokenizer

import (
	"bytes"
	_ "embed"
	"sync"
)

//go:generate go run ./internal/gendemo -o kvrouter-demo.json

// demoJSON is a small byte-level BPE tokenizer (256 byte tokens, merges
// learned from an English sample by internal/train, the Qwen2
// pre-tokenizer, and the chatml and llama3 markers as special tokens).
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
