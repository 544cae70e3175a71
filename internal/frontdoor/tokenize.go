// This file holds the engine tokenizer: a worker's POST /tokenize, its answers cached.

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
	"strings"
	"sync"
	"sync/atomic"

	"github.com/zeebo/xxh3"
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

// Engine asks a worker serving the request's model (POST /tokenize, which
// vLLM and SGLang serve, and so does our simulated engine) and keeps the
// answers in a bounded LRU: the engine's own tokenizer is sure to agree with
// the engine. SGLang's /tokenize takes a prompt only, so chats bound for
// SGLang workers are routed on load alone.
type Engine struct {
	Client *http.Client
	// Targets returns the workers serving model.
	Targets func(model string) []EngineTarget

	next  atomic.Uint64
	mu    sync.Mutex
	cache *lru
}

// EngineTarget is a worker Engine may ask.
type EngineTarget struct {
	URL string
	// Chats says the worker's /tokenize renders chat messages (vLLM's
	// does, SGLang's does not).
	Chats bool
}

// NewEngine returns an engine tokenizer caching up to size answers.
func NewEngine(client *http.Client, targets func(string) []EngineTarget, size int) *Engine {
	return &Engine{Client: client, Targets: targets, cache: newLRU(size)}
}

var (
	// errTokenize is an engine that could not tokenize a request.
	errTokenize = errors.New("engine tokenization failed")
	// ErrNoChatTokenize is a chat for workers whose /tokenize takes no
	// messages.
	ErrNoChatTokenize = errors.New("the workers' /tokenize does not render chats (SGLang's takes a prompt only); give --tokenizer the model's tokenizer files")
)

// TokenizeQuery is a POST /tokenize body: vLLM's TokenizeCompletionRequest
// (Prompt) or TokenizeChatRequest (Messages and what else shapes the
// prompt); SGLang's takes the first form only.
type TokenizeQuery struct {
	Model                string          `json:"model"`
	Prompt               *string         `json:"prompt,omitempty"`
	Messages             json.RawMessage `json:"messages,omitempty"`
	Tools                json.RawMessage `json:"tools,omitempty"`
	ChatTemplateKwargs   json.RawMessage `json:"chat_template_kwargs,omitempty"`
	AddSpecialTokens     bool            `json:"add_special_tokens"`
	AddGenerationPrompt  *bool           `json:"add_generation_prompt,omitempty"`
	ContinueFinalMessage bool            `json:"continue_final_message,omitempty"`
}

// queryOf is the /tokenize body for a request, with the engines' defaults
// for add_special_tokens: true for completions, false for chats.
func queryOf(req *Request) (*TokenizeQuery, error) {
	q := &TokenizeQuery{Model: req.Model}
	var err error
	if q.AddSpecialTokens, err = boolean(req.top[keyAddSpecialTokens], keyAddSpecialTokens, req.Kind == KindCompletion); err != nil {
		return nil, err
	}
	if req.Kind == KindCompletion {
		q.Prompt = &req.Prompt
		return q, nil
	}
	cr, err := chatRequestOf(req.top, req.RawMessages, req.AddGenerationPrompt)
	if err != nil {
		return nil, err
	}
	q.Messages, q.Tools, q.ChatTemplateKwargs = cr.Messages, cr.Tools, cr.ChatTemplateKwargs
	q.AddGenerationPrompt, q.ContinueFinalMessage = cr.AddGenerationPrompt, cr.ContinueFinalMessage
	return q, nil
}

func (e *Engine) Tokenize(ctx context.Context, req *Request) ([]uint32, error) {
	if req.HasTokens {
		return req.Tokens, nil
	}
	q, err := queryOf(req)
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(q)
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
	targets := e.Targets(req.Model)
	if len(targets) == 0 {
		return nil, fmt.Errorf("%w: no worker serves model %q", errTokenize, req.Model)
	}
	var errs []error
	start := int(e.next.Add(1))
	asked := 0
	for i := range targets {
		t := targets[(start+i)%len(targets)]
		if q.Prompt == nil && !t.Chats {
			continue
		}
		asked++
		toks, err := askTokenize(ctx, e.Client, t.URL, raw)
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
	if asked == 0 {
		return nil, fmt.Errorf("%w: model %q: %w", errTokenize, req.Model, ErrNoChatTokenize)
	}
	return nil, fmt.Errorf("%w: %w", errTokenize, errors.Join(errs...))
}

// AskTokenize asks the engine at base to tokenize q.
func AskTokenize(ctx context.Context, c *http.Client, base string, q *TokenizeQuery) ([]uint32, error) {
	raw, err := json.Marshal(q)
	if err != nil {
		return nil, err
	}
	return askTokenize(ctx, c, base, raw)
}

func askTokenize(ctx context.Context, c *http.Client, base string, body []byte) ([]uint32, error) {
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(base, "/")+"/tokenize", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(hr)
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
