// This file holds Tokenizer: loading a tokenizer.json, Encode and Decode.

package tokenizer

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"unicode/utf8"

	"kvrouter/internal/tokenizer/internal/pretok"
)

// Tokenizer encodes text into token ids and decodes them back. It is
// immutable once loaded and safe for concurrent use.
type Tokenizer struct {
	model      *bpe
	added      *addedVocab
	normalizer normalizer      // nil: identity
	pre        []preStep       // empty: the whole text is one piece
	pattern    *pretok.Pattern // onePattern(pre)
	prefix     *prefixCache    // nil unless prefixSafe
	post       *postProcessor
	decoder    []decodeStep
	hasDecoder bool
	vocabSize  int
	// maxBytesPerToken is MaxBytesPerToken, computed at load.
	maxBytesPerToken int
}

// fileJSON is a tokenizer.json.
type fileJSON struct {
	Version       string           `json:"version"`
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
	Model         *modelJSON       `json:"model"`
}

// LoadFile loads the tokenizer.json at path.
func LoadFile(path string) (*Tokenizer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer f.Close()
	t, err := Load(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Load reads a tokenizer.json in the Hugging Face tokenizers format.
func Load(r io.Reader) (*Tokenizer, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: reading: %w", err)
	}
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("tokenizer: %w: %w", ErrInvalid, err)
	}
	if f.Version != "" && f.Version != "1.0" {
		return nil, unsupported("version", "%q (want \"1.0\")", f.Version)
	}
	if f.Model == nil {
		return nil, invalid("model", "missing")
	}
	t := &Tokenizer{}
	if t.normalizer, err = parseNormalizer(f.Normalizer, "normalizer"); err != nil {
		return nil, err
	}
	var byteLevel bool
	if t.pre, byteLevel, err = parsePreTokenizer(f.PreTokenizer, "pre_tokenizer"); err != nil {
		return nil, err
	}
	t.pattern = onePattern(t.pre)
	if t.post, err = parsePostProcessor(f.PostProcessor, "post_processor"); err != nil {
		return nil, err
	}
	if t.decoder, t.hasDecoder, err = parseDecoder(f.Decoder, "decoder"); err != nil {
		return nil, err
	}
	if t.model, err = newBPE(f.Model, byteLevel); err != nil {
		return nil, err
	}
	t.added = newAddedVocab(f.AddedTokens, t.model, t.normalizer)
	ids := make(map[uint32]struct{}, len(t.model.tokens)+len(t.added.byID))
	for id := range t.model.tokens {
		ids[id] = struct{}{}
	}
	for id := range t.added.byID {
		ids[id] = struct{}{}
	}
	t.vocabSize = len(ids)
	t.maxBytesPerToken = t.bytesPerToken()
	if prefixSafe(t) {
		t.prefix = new(prefixCache)
	}
	return t, nil
}

// VocabSize returns the number of distinct token ids: the model's
// vocabulary and the added tokens together.
func (t *Tokenizer) VocabSize() int { return t.vocabSize }

// TokenID returns the id of the token s, an added token or a vocabulary
// entry (in its stored form, e.g. "Ġworld" in byte-level vocabularies).
func (t *Tokenizer) TokenID(s string) (uint32, bool) {
	if id, ok := t.added.byContent[s]; ok {
		return id, true
	}
	id, ok := t.model.vocab[s]
	return id, ok
}

// Token returns the token with the given id, in its stored form.
func (t *Tokenizer) Token(id uint32) (string, bool) {
	if a, ok := t.added.byID[id]; ok {
		return a.content, true
	}
	s, ok := t.model.tokens[id]
	return s, ok
}

// scratch holds the buffers of one Encode call.
type scratch struct {
	pieces, next     []string
	syms             []uint32
	rules            []mergeRule
	prevPos, nextPos []int32
	heap             candHeap
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// Encode returns the token ids of text. Added tokens, special or not, are
// recognised in the text, as engines do by default. addSpecial adds the
// post-processor's tokens (such as Llama 3's <|begin_of_text|>): engines
// add them to a plain prompt, but not to a prompt rendered from a chat
// template, which carries them itself.
func (t *Tokenizer) Encode(text string, addSpecial bool) []uint32 {
	if !utf8.ValidString(text) {
		// Engines are handed Python str, never bytes: see the package
		// documentation.
		text = lossyUTF8([]byte(text))
	}
	ids := make([]uint32, 0, len(text)/4+4)
	sc := scratchPool.Get().(*scratch)
	if t.prefix != nil && len(text) >= minChunked {
		ids = t.encodeChunked(ids, text, sc)
	} else {
		ids = t.encodeRaw(ids, text, sc)
	}
	clear(sc.pieces[:cap(sc.pieces)])
	clear(sc.next[:cap(sc.next)])
	scratchPool.Put(sc)
	if addSpecial {
		ids = t.post.apply(ids)
	}
	return ids
}

// encodeRaw appends the ids of text, valid UTF-8, without the
// post-processor's tokens.
func (t *Tokenizer) encodeRaw(ids []uint32, text string, sc *scratch) []uint32 {
	atStart := true
	t.added.raw.each(text, func(seg string, tok *addedToken) {
		if tok != nil {
			ids = append(ids, tok.id)
			atStart = false
			return
		}
		if t.normalizer != nil {
			seg = t.normalizer.normalize(seg)
		}
		t.added.norm.each(seg, func(seg string, tok *addedToken) {
			if tok != nil {
				ids = append(ids, tok.id)
			} else {
				ids = t.encodeText(ids, seg, atStart, sc)
			}
			atStart = false
		})
	})
	return ids
}

// encodeText pre-tokenizes normalized text without added tokens and
// encodes every piece. atStart says that s begins the input text, which
// Metaspace's prepend_scheme "first" needs to know.
func (t *Tokenizer) encodeText(dst []uint32, s string, atStart bool, sc *scratch) []uint32 {
	if p := t.pattern; p != nil {
		// Each piece to the model as soon as it is found.
		last := 0
		for i := 0; i < len(s); {
			start, end := p.Next(s, i)
			if start < 0 {
				break
			}
			if start > last {
				dst = t.model.encodeWord(dst, s[last:start], sc)
			}
			dst = t.model.encodeWord(dst, s[start:end], sc)
			last, i = end, end
		}
		if last < len(s) {
			dst = t.model.encodeWord(dst, s[last:], sc)
		}
		return dst
	}
	pieces := append(sc.pieces[:0], s)
	for _, step := range t.pre {
		next := sc.next[:0]
		for k, p := range pieces {
			if m, ok := step.(metaspaceStep); ok {
				next = m.splitAt(next, p, atStart && k == 0)
			} else {
				next = step.split(next, p)
			}
		}
		pieces, sc.next = next, pieces
	}
	sc.pieces = pieces
	for _, p := range pieces {
		dst = t.model.encodeWord(dst, p, sc)
	}
	return dst
}

// Decode returns the text of ids, special tokens included, so that
// Decode(Encode(text)) gives text back. Unknown ids are skipped, and bytes
// that do not form UTF-8 become U+FFFD, as in tokenizers.
func (t *Tokenizer) Decode(ids []uint32) string { return t.decode(ids, false) }

// DecodeSkipSpecial is Decode without the special tokens, which is how
// engines detokenize generated text by default.
func (t *Tokenizer) DecodeSkipSpecial(ids []uint32) string { return t.decode(ids, true) }

// IsSpecial reports whether id is an added token marked special.
func (t *Tokenizer) IsSpecial(id uint32) bool {
	a, ok := t.added.byID[id]
	return ok && a.special
}

func (t *Tokenizer) decode(ids []uint32, skipSpecial bool) string {
	tokens := make([]string, 0, len(ids))
	for _, id := range ids {
		if skipSpecial && t.IsSpecial(id) {
			continue
		}
		if s, ok := t.Token(id); ok {
			tokens = append(tokens, s)
		}
	}
	if !t.hasDecoder {
		return strings.Join(tokens, " ")
	}
	for _, d := range t.decoder {
		tokens = d.decode(tokens)
	}
	return strings.Join(tokens, "")
}
