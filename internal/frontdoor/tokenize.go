// This file holds the tokenizers: in process with a chat template, or an engine's /tokenize.

package frontdoor

import (
	"bytes"
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/zeebo/xxh3"

	"kvrouter/internal/tokenizer"
)

// Tokenizer turns a request into the token ids its engine will see. Token
// ids the client sent are used as they are. A nil result with no error
// means the request cannot be tokenized here (images): it is routed on
// load alone. An error wrapping ErrBadRequest is the client's to fix; any
// other leaves the request routed on load alone.
type Tokenizer interface {
	Tokenize(ctx context.Context, req *Request) ([]uint32, error)
}

var (
	_ Tokenizer = (*Local)(nil)
	_ Tokenizer = (*Engine)(nil)
)

// Local tokenizes in process with a Hugging Face tokenizer and a chat
// template.
type Local struct {
	Tok      *tokenizer.Tokenizer
	Template tokenizer.Template
}

func (l *Local) Tokenize(_ context.Context, req *Request) ([]uint32, error) {
	if req.HasTokens {
		return req.Tokens, nil
	}
	if req.Kind == KindCompletion {
		if err := checkContextBytes(req.Model, req.Prompt, req.context, l.Tok.MaxBytesPerToken()); err != nil {
			return nil, err
		}
		return l.Tok.Encode(req.Prompt, true), nil
	}
	if req.Messages == nil {
		return nil, nil
	}
	text, err := l.Template.Render(req.Messages, req.AddGenerationPrompt)
	if err != nil {
		return nil, fmt.Errorf("%w: messages: %v", ErrBadRequest, err)
	}
	// The rendered text, not the messages: a template may trim them.
	if err := checkContextBytes(req.Model, text, req.context, l.Tok.MaxBytesPerToken()); err != nil {
		return nil, err
	}
	// The template carries its own special tokens, as engines assume.
	return l.Tok.Encode(text, false), nil
}

// Engine asks a worker serving the request's model (vLLM's POST /tokenize,
// which our simulated engine also answers) and keeps the answers in a
// bounded LRU: the router must agree with the engine token for token, and
// the engine's own tokenizer is the only sure way.
type Engine struct {
	Client *http.Client
	// URLs returns the HTTP fronts of the workers serving model.
	URLs func(model string) []string

	next  atomic.Uint64
	mu    sync.Mutex
	cache *lru
}

// NewEngine returns an engine tokenizer caching up to size answers.
func NewEngine(client *http.Client, urls func(string) []string, size int) *Engine {
	return &Engine{Client: client, URLs: urls, cache: newLRU(size)}
}

// errTokenize is an engine that could not tokenize a request.
var errTokenize = errors.New("engine tokenization failed")

type tokenizeBody struct {
	Model               string          `json:"model"`
	Prompt              *string         `json:"prompt,omitempty"`
	Messages            json.RawMessage `json:"messages,omitempty"`
	AddSpecialTokens    bool            `json:"add_special_tokens"`
	AddGenerationPrompt *bool           `json:"add_generation_prompt,omitempty"`
}

func (e *Engine) Tokenize(ctx context.Context, req *Request) ([]uint32, error) {
	if req.HasTokens {
		return req.Tokens, nil
	}
	body := tokenizeBody{Model: req.Model}
	if req.Kind == KindCompletion {
		body.Prompt, body.AddSpecialTokens = &req.Prompt, true
	} else {
		body.Messages, body.AddGenerationPrompt = req.RawMessages, &req.AddGenerationPrompt
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	key := req.Model + "\x00" + fmt.Sprint(xxh3.Hash128(raw))
	e.mu.Lock()
	toks, ok := e.cache.get(key)
	e.mu.Unlock()
	if ok {
		return toks, nil
	}
	urls := e.URLs(req.Model)
	if len(urls) == 0 {
		return nil, fmt.Errorf("%w: no worker serves model %q", errTokenize, req.Model)
	}
	var errs []error
	start := int(e.next.Add(1))
	for i := range urls {
		u := urls[(start+i)%len(urls)]
		toks, err := e.ask(ctx, u, raw)
		if err == nil {
			e.mu.Lock()
			e.cache.put(key, toks)
			e.mu.Unlock()
			return toks, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("%w: %w", errTokenize, errors.Join(errs...))
}

func (e *Engine) ask(ctx context.Context, base string, body []byte) ([]uint32, error) {
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(base, "/")+"/tokenize", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/json")
	resp, err := e.Client.Do(hr)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("%s/tokenize: %w", base, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s/tokenize: %s: %s", base, resp.Status, bytes.TrimSpace(b))
	}
	var out struct {
		Tokens []uint32 `json:"tokens"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("%s/tokenize: %w", base, err)
	}
	if out.Tokens == nil {
		out.Tokens = []uint32{}
	}
	return out.Tokens, nil
}

// lru is a bounded least-recently-used map; its owner locks it.
type lru struct {
	max   int
	order *list.List // front: most recent
	items map[string]*list.Element
}

type lruItem struct {
	key  string
	toks []uint32
}

func newLRU(max int) *lru {
	return &lru{max: max, order: list.New(), items: map[string]*list.Element{}}
}

func (c *lru) get(key string) ([]uint32, bool) {
	el, ok := c.items[key]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*lruItem).toks, true
}

func (c *lru) put(key string, toks []uint32) {
	if c.max <= 0 {
		return
	}
	if el, ok := c.items[key]; ok {
		el.Value.(*lruItem).toks = toks
		c.order.MoveToFront(el)
		return
	}
	c.items[key] = c.order.PushFront(&lruItem{key, toks})
	for c.order.Len() > c.max {
		old := c.order.Back()
		c.order.Remove(old)
		delete(c.items, old.Value.(*lruItem).key)
	}
}

// Tokenizer flag values besides a path.
const (
	TokenizerDefault = "default"
	TokenizerEngine  = "engine"
)

// LoadTemplate resolves --chat-template and --tokenizer-config: a
// tokenizer_config.json's chat_template is matched against the built-in
// formats; otherwise the name of a built-in format, or the path of a Go
// text/template file.
func LoadTemplate(name, tokenizerConfig string) (tokenizer.Template, error) {
	if tokenizerConfig != "" {
		b, err := os.ReadFile(tokenizerConfig)
		if err != nil {
			return nil, fmt.Errorf("--tokenizer-config: %w", err)
		}
		text, err := tokenizer.ConfigChatTemplate(b)
		if err != nil {
			return nil, fmt.Errorf("--tokenizer-config %s: %w", tokenizerConfig, err)
		}
		t, err := tokenizer.DetectTemplate(text)
		if err != nil {
			return nil, fmt.Errorf("--tokenizer-config %s: %w (give --chat-template a built-in name or a Go template file instead)", tokenizerConfig, err)
		}
		return t, nil
	}
	if t, err := tokenizer.TemplateByName(name); err == nil {
		return t, nil
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("--chat-template %q: not one of %v and not a readable Go template file: %w",
			name, tokenizer.TemplateNames(), err)
	}
	t, err := tokenizer.NewTemplate(name, string(b))
	if err != nil {
		return nil, fmt.Errorf("--chat-template %s: %w", name, err)
	}
	return t, nil
}
