// This file holds Reference: the output an engine must give for a prompt, computed without an engine.
package mocker

import "kvrouter/internal/tokenizer"

// Reference computes what an engine of a configuration answers for a
// prompt when it computes every block itself. Output depends only on the
// prompt and the model seed, through the KV bytes of the prompt's blocks,
// so an answer whose blocks came from a cache or a peer must equal it: a
// fault test counts any other answer as wrong.
type Reference struct {
	cfg   Config
	tok   *tokenizer.Tokenizer
	vocab *vocab
}

// NewReference returns the Reference of engines configured as cfg (the
// fields that matter: BlockSize, KVBytesPerToken, ModelSeed).
func NewReference(cfg Config) *Reference {
	cfg.setDefaults()
	tok := tokenizer.Default()
	return &Reference{cfg: cfg, tok: tok, vocab: newVocab(tok)}
}

// Text is the base model's completion text for prompt token ids and
// maxTokens (a LoRA adapter seeds its content apart).
func (r *Reference) Text(prompt []uint32, maxTokens int) string {
	bs := r.cfg.BlockSize
	seeds := contentSeeds(prompt, bs, "")
	block := make([]byte, r.cfg.blockBytes())
	d := newDigest()
	for _, s := range seeds {
		fillBlock(block, r.cfg.ModelSeed, s)
		d.block(block)
	}
	d.tail(prompt[len(seeds)*bs:])
	return r.tok.Decode(r.vocab.generate(d.sum(), maxTokens))
}
