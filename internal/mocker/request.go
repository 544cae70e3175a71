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
	N *int `json:"n"`
	// LoRAPath is SGLang's adapter field: a name, or a batch's list.
	LoRAPath  json.RawMessage `json:"lora_path"`
	MaxTokens *int            `json:"max_tokens"`
	CacheSalt string          `json:"cache_salt"`
	// The router names the rank; SGLang's own field is data_parallel_rank.
	DPRank           *int `json:"dp_rank"`
	DataParallelRank *int `json:"data_parallel_rank"`
	// An object or null, as vLLM requires; the hint in it, or at the top
	// level for SGLang, is read by hints.Extract. Its transfer members say
	// which leg of a disaggregated request this is (vLLM).
	KVTransferParams *kvTransferParams `json:"kv_transfer_params"`
	// SGLang's disaggregation: the prefill engine's bootstrap server and
	// the request's room there.
	BootstrapHost *string `json:"bootstrap_host"`
	BootstrapPort *int    `json:"bootstrap_port"`
	BootstrapRoom *uint64 `json:"bootstrap_room"`
}

type completionBody struct {
	commonBody
	Prompt           json.RawMessage `json:"prompt"`
	AddSpecialTokens *bool           `json:"add_special_tokens"`
}

type chatBody struct {
	commonBody
	chatPart
	MaxCompletionTokens *int `json:"max_completion_tokens"`
}

// chatPart is what shapes a chat's prompt, in a chat completion request
// and in vLLM's chat /tokenize request alike.
type chatPart struct {
	Messages             json.RawMessage `json:"messages"`
	Tools                json.RawMessage `json:"tools"`
	ChatTemplateKwargs   json.RawMessage `json:"chat_template_kwargs"`
	AddGenerationPrompt  *bool           `json:"add_generation_prompt"`
	ContinueFinalMessage bool            `json:"continue_final_message"`
	AddSpecialTokens     *bool           `json:"add_special_tokens"`
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
	cfg   *Config
	model *tokenizer.Model
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
	tokens, err := p.messages(&b.chatPart)
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
	path, err := loraPath(b.LoRAPath)
	if err != nil {
		return out, err
	}
	if out.lora, err = p.cfg.adapter(b.Model, path); err != nil {
		return out, err
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
	if out.dpRank == nil || (p.cfg.Flavor == SGLang && b.DataParallelRank != nil) {
		// SGLang's own field (the router writes it) before ours.
		out.dpRank = b.DataParallelRank
	}
	out.hint = p.hint(body)
	if out.kv, err = p.transfer(b); err != nil {
		return out, err
	}
	if out.kv != nil && out.kv.export && p.cfg.Flavor == SGLang {
		// An SGLang prefill engine stops after the first token: the decode
		// engine generates the rest.
		out.maxTokens = 1
	}
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
	tokens := p.model.EncodeText(s, addSpecial)
	if len(tokens) == 0 {
		return nil, badRequest("prompt: encodes to no tokens")
	}
	return tokens, nil
}

func (p *parser) ids(ids []int64) ([]uint32, error) {
	if len(ids) == 0 {
		return nil, badRequest("prompt: empty list of token ids")
	}
	vocab := int64(p.model.Tok.VocabSize())
	out := make([]uint32, len(ids))
	for i, id := range ids {
		if id < 0 || id >= vocab {
			return nil, badRequest("prompt[%d]: token id %d is out of vocabulary (0..%d)", i, id, vocab-1)
		}
		out[i] = uint32(id)
	}
	return out, nil
}

// messages renders a chat with the model's chat template and encodes it,
// as the engine does: without special tokens unless the request asks, the
// template carrying them.
func (p *parser) messages(c *chatPart) ([]uint32, error) {
	if m := bytes.TrimSpace(c.Messages); len(m) == 0 || bytes.Equal(m, []byte("null")) || bytes.Equal(bytes.Join(bytes.Fields(m), nil), []byte("[]")) {
		return nil, badRequest("messages: at least one message is required")
	}
	text, err := p.model.RenderChat(&tokenizer.ChatRequest{Messages: c.Messages, Tools: c.Tools, ChatTemplateKwargs: c.ChatTemplateKwargs,
		AddGenerationPrompt: c.AddGenerationPrompt, ContinueFinalMessage: c.ContinueFinalMessage})
	if err != nil {
		return nil, badRequest("messages: %v", err)
	}
	return p.text(text, c.AddSpecialTokens != nil && *c.AddSpecialTokens)
}

// tokenizeBody is vLLM's /tokenize request: a prompt or chat messages.
type tokenizeBody struct {
	Model  string  `json:"model"`
	Prompt *string `json:"prompt"`
	chatPart
}

func (p *parser) tokenize(body []byte) ([]uint32, error) {
	var b tokenizeBody
	if err := decodeBody(body, &b); err != nil {
		return nil, err
	}
	if _, err := p.cfg.adapter(b.Model, ""); err != nil {
		return nil, err
	}
	switch {
	case b.Prompt != nil && b.Messages != nil:
		return nil, badRequest("give prompt or messages, not both")
	case b.Prompt != nil:
		return p.model.EncodeText(*b.Prompt, b.AddSpecialTokens == nil || *b.AddSpecialTokens), nil
	case b.Messages != nil:
		return p.messages(&b.chatPart)
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
		out.keys = p.cfg.engineHashes(p.model.EncodeText(*b.Prompt, true), b.CacheSalt, "")
	case b.Tokens != nil:
		out.keys = p.cfg.engineHashes(b.Tokens, b.CacheSalt, "")
	}
	if out.keys == nil && (b.Prompt != nil || b.Tokens != nil) {
		out.keys = []uint64{} // shorter than a block: nothing, not everything
	}
	out.dpRank = b.DPRank
	return out, nil
}

// loraPath reads SGLang's lora_path: a string, or a list holding one.
func loraPath(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var list []*string
	if json.Unmarshal(raw, &list) == nil && len(list) == 1 {
		if list[0] == nil {
			return "", nil
		}
		return *list[0], nil
	}
	return "", badRequest("lora_path: want an adapter's name, or a list of one")
}
