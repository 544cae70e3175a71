// This file holds the parsing of request bodies: completions, chat, /tokenize and admin evict.

package mocker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"kvrouter/internal/hints"
	"kvrouter/internal/tokenizer"
)

// Errors the HTTP layer maps to status codes.
var (
	errBadRequest    = errors.New("bad request")
	errModelNotFound = errors.New("model not found")
)

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errBadRequest, fmt.Sprintf(format, args...))
}

// commonBody holds the fields completions and chat requests share. Fields
// an engine accepts but the simulation has no use for (temperature, top_p,
// stop...) are ignored, as unknown fields are.
type commonBody struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	N         *int   `json:"n"`
	MaxTokens *int   `json:"max_tokens"`
	CacheSalt string `json:"cache_salt"`
	// The router names the rank; SGLang's own field is data_parallel_rank.
	DPRank           *int `json:"dp_rank"`
	DataParallelRank *int `json:"data_parallel_rank"`
	// An object or null, as vLLM requires; the hint in it, or at the top
	// level for SGLang, is read by hints.Extract.
	KVTransferParams *struct{} `json:"kv_transfer_params"`
}

type completionBody struct {
	commonBody
	Prompt           json.RawMessage `json:"prompt"`
	AddSpecialTokens *bool           `json:"add_special_tokens"`
}

type chatBody struct {
	commonBody
	Messages            []chatMessage `json:"messages"`
	MaxCompletionTokens *int          `json:"max_completion_tokens"`
	AddGenerationPrompt *bool         `json:"add_generation_prompt"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// parsed is a request body read into what the engine schedules, plus how
// to answer.
type parsed struct {
	request
	stream       bool
	includeUsage bool
}

// parser reads request bodies for one engine configuration.
type parser struct {
	cfg  *Config
	tok  *tokenizer.Tokenizer
	tmpl tokenizer.Template
}

func decodeBody(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return badRequest("request body: %v", err)
	}
	return nil
}

func (p *parser) completion(body []byte) (parsed, error) {
	var b completionBody
	if err := decodeBody(body, &b); err != nil {
		return parsed{}, err
	}
	tokens, err := p.prompt(b.Prompt, b.AddSpecialTokens == nil || *b.AddSpecialTokens)
	if err != nil {
		return parsed{}, err
	}
	return p.finish(body, &b.commonBody, tokens, b.MaxTokens)
}

func (p *parser) chat(body []byte) (parsed, error) {
	var b chatBody
	if err := decodeBody(body, &b); err != nil {
		return parsed{}, err
	}
	tokens, err := p.messages(b.Messages, b.AddGenerationPrompt == nil || *b.AddGenerationPrompt)
	if err != nil {
		return parsed{}, err
	}
	maxTokens := b.MaxCompletionTokens
	if maxTokens == nil {
		maxTokens = b.MaxTokens
	}
	return p.finish(body, &b.commonBody, tokens, maxTokens)
}

func (p *parser) finish(body []byte, b *commonBody, tokens []uint32, maxTokens *int) (parsed, error) {
	out := parsed{stream: b.Stream, includeUsage: b.StreamOptions != nil && b.StreamOptions.IncludeUsage}
	if b.Model != "" && b.Model != p.cfg.Model {
		return out, fmt.Errorf("%w: the model %q does not exist; this engine serves %q", errModelNotFound, b.Model, p.cfg.Model)
	}
	if b.N != nil && *b.N != 1 {
		return out, badRequest("n: only 1 is supported, got %d", *b.N)
	}
	out.maxTokens = DefaultMaxTokens
	if maxTokens != nil {
		out.maxTokens = *maxTokens
	}
	if out.maxTokens < 1 {
		return out, badRequest("max_tokens: must be at least 1, got %d", out.maxTokens)
	}
	if len(tokens)+out.maxTokens > p.cfg.MaxModelLen {
		return out, badRequest("%d prompt tokens + max_tokens %d exceed the maximum context length %d", len(tokens), out.maxTokens, p.cfg.MaxModelLen)
	}
	out.tokens = tokens
	out.salt = b.CacheSalt
	out.dpRank = b.DPRank
	if out.dpRank == nil {
		out.dpRank = b.DataParallelRank
	}
	out.hint = p.hint(body)
	return out, nil
}

// hint returns the hint this engine reads in body: at its flavour's
// placements, the current one first (an engine does not look where the
// other engine reads hints); nil when there is none.
func (p *parser) hint(body []byte) []byte {
	from := []hints.Placement{hints.PlaceVLLM, hints.PlaceVLLMOld}
	if p.cfg.Flavor == SGLang {
		from = []hints.Placement{hints.PlaceSGLang, hints.PlaceSGLangOld}
	}
	raw, _, _, _ := hints.Extract(body, from...) // body decoded as an object already
	return raw
}

// prompt reads a completions prompt: text, token ids, or a batch of one.
func (p *parser) prompt(raw json.RawMessage, addSpecial bool) ([]uint32, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, badRequest("prompt: missing")
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return p.text(text, addSpecial)
	}
	var ids []int64
	if json.Unmarshal(raw, &ids) == nil {
		return p.ids(ids)
	}
	var texts []string
	if json.Unmarshal(raw, &texts) == nil {
		if len(texts) != 1 {
			return nil, badRequest("prompt: batches of %d prompts are not supported; send one", len(texts))
		}
		return p.text(texts[0], addSpecial)
	}
	var batches [][]int64
	if json.Unmarshal(raw, &batches) == nil {
		if len(batches) != 1 {
			return nil, badRequest("prompt: batches of %d prompts are not supported; send one", len(batches))
		}
		return p.ids(batches[0])
	}
	return nil, badRequest("prompt: want a string or a list of token ids")
}

func (p *parser) text(s string, addSpecial bool) ([]uint32, error) {
	tokens := p.tok.Encode(s, addSpecial)
	if len(tokens) == 0 {
		return nil, badRequest("prompt: encodes to no tokens")
	}
	return tokens, nil
}

func (p *parser) ids(ids []int64) ([]uint32, error) {
	if len(ids) == 0 {
		return nil, badRequest("prompt: empty list of token ids")
	}
	vocab := int64(p.tok.VocabSize())
	out := make([]uint32, len(ids))
	for i, id := range ids {
		if id < 0 || id >= vocab {
			return nil, badRequest("prompt[%d]: token id %d is out of vocabulary (0..%d)", i, id, vocab-1)
		}
		out[i] = uint32(id)
	}
	return out, nil
}

// messages renders chat messages with the chat template and encodes them.
func (p *parser) messages(msgs []chatMessage, addGenerationPrompt bool) ([]uint32, error) {
	if len(msgs) == 0 {
		return nil, badRequest("messages: at least one message is required")
	}
	conv := make([]tokenizer.Message, len(msgs))
	for i, m := range msgs {
		content, err := tokenizer.FlattenContent(m.Content)
		if err != nil {
			return nil, badRequest("messages[%d].content: %v", i, err)
		}
		if m.Role == "" {
			return nil, badRequest("messages[%d].role: missing", i)
		}
		conv[i] = tokenizer.Message{Role: m.Role, Content: content}
	}
	text, err := p.tmpl.Render(conv, addGenerationPrompt)
	if err != nil {
		return nil, badRequest("messages: %v", err)
	}
	// The template carries its own special tokens, as engines assume.
	return p.text(text, false)
}

// tokenizeBody is vLLM's /tokenize request: a prompt or chat messages.
type tokenizeBody struct {
	Model               string        `json:"model"`
	Prompt              *string       `json:"prompt"`
	Messages            []chatMessage `json:"messages"`
	AddSpecialTokens    *bool         `json:"add_special_tokens"`
	AddGenerationPrompt *bool         `json:"add_generation_prompt"`
}

func (p *parser) tokenize(body []byte) ([]uint32, error) {
	var b tokenizeBody
	if err := decodeBody(body, &b); err != nil {
		return nil, err
	}
	if b.Model != "" && b.Model != p.cfg.Model {
		return nil, fmt.Errorf("%w: the model %q does not exist; this engine serves %q", errModelNotFound, b.Model, p.cfg.Model)
	}
	switch {
	case b.Prompt != nil && b.Messages != nil:
		return nil, badRequest("give prompt or messages, not both")
	case b.Prompt != nil:
		return p.tok.Encode(*b.Prompt, b.AddSpecialTokens == nil || *b.AddSpecialTokens), nil
	case b.Messages != nil:
		return p.messages(b.Messages, b.AddGenerationPrompt == nil || *b.AddGenerationPrompt)
	}
	return nil, badRequest("prompt or messages: one is required")
}

// evictBody is POST /admin/evict.
type evictBody struct {
	Tier      string   `json:"tier"`
	Prompt    *string  `json:"prompt"`
	Tokens    []uint32 `json:"tokens"`
	CacheSalt string   `json:"cache_salt"`
	DPRank    *int     `json:"dp_rank"`
}

// evictRequest says what to evict: keys nil means everything.
type evictRequest struct {
	gpu, runner bool
	keys        []uint64
	dpRank      *int
}

func (p *parser) evict(body []byte) (evictRequest, error) {
	var b evictBody
	if len(bytes.TrimSpace(body)) > 0 {
		if err := decodeBody(body, &b); err != nil {
			return evictRequest{}, err
		}
	}
	var out evictRequest
	switch b.Tier {
	case tierGPU:
		out.gpu = true
	case tierRunner:
		out.runner = true
	case tierAll, "":
		out.gpu, out.runner = true, true
	default:
		return out, badRequest("tier: %q is not a tier; use %q, %q or %q", b.Tier, tierGPU, tierRunner, tierAll)
	}
	switch {
	case b.Prompt != nil && b.Tokens != nil:
		return out, badRequest("give prompt or tokens, not both")
	case b.Prompt != nil:
		out.keys = p.cfg.engineHashes(p.tok.Encode(*b.Prompt, true), b.CacheSalt)
	case b.Tokens != nil:
		out.keys = p.cfg.engineHashes(b.Tokens, b.CacheSalt)
	}
	if out.keys == nil && (b.Prompt != nil || b.Tokens != nil) {
		out.keys = []uint64{} // shorter than a block: nothing, not everything
	}
	out.dpRank = b.DPRank
	return out, nil
}
