// This file holds the checker: the probes, one model's check, and the loop.

package tokcheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"kvrouter/internal/frontdoor"
	"kvrouter/internal/router"
	"kvrouter/internal/tokenizer"
)

// The probes: text that stresses pre-tokenization (digits, punctuation,
// accents, CJK, emoji, whitespace runs, a newline run) and a chat with a
// system prompt and several turns.
const (
	ProbePrompt = "The quick brown fox jumps over 13 lazy dogs at 09:45 on 2024-05-01 — naïve café, " +
		"東京タワーは333m。🍣👍🏽\n\n\tIndented   spaces,\r\n and 1234567 digits; x+=y**2 // done."
	probeChat = `{"messages":[` +
		`{"role":"system","content":"You are a concise assistant."},` +
		`{"role":"user","content":"What is 12 × 7? Answer in one word."},` +
		`{"role":"assistant","content":"Eighty-four."},` +
		`{"role":"user","content":"And in French, with an emoji? 🇫🇷"}]}`
)

// Default is how often a model is checked again.
const Default = 5 * time.Minute

// poll bounds how long a new model waits for its first check.
const poll = time.Second

// Status is the outcome of a model's last check.
type Status struct {
	Model     string    `json:"model"`
	Worker    string    `json:"worker_id,omitempty"`
	CheckedAt time.Time `json:"checked_at"`
	// Compared says the router's ids were compared with the engine's
	// (a local tokenizer); Mismatch that they differed, where Diffs say.
	Compared bool   `json:"compared"`
	Mismatch bool   `json:"mismatch"`
	Diffs    []Diff `json:"diffs,omitempty"`
	// ChatChecked is false where the engine cannot tokenize a chat
	// (SGLang): the rendered chat's text is compared instead.
	ChatChecked bool   `json:"chat_template_checked"`
	Error       string `json:"error,omitempty"`
}

// Checker checks, per model, the router's tokenizer against an engine's.
type Checker struct {
	// Local is the router's tokenizer; nil when it asks the engines.
	Local  *frontdoor.Local
	Client *http.Client
	// Models and Workers say what to check and whom to ask.
	Models  func() []string
	Workers func(model string) []router.Worker
	// Every is how often a model is checked again.
	Every time.Duration
	Now   func() time.Time
	// After paces the loop (time.After when nil).
	After func(time.Duration) <-chan time.Time
	Log   *slog.Logger
	// Mismatch is the gauge kvrouter_tokenizer_mismatch (NewGauge).
	Mismatch *prometheus.GaugeVec

	mu     sync.Mutex
	status map[string]Status
	next   map[string]int // round-robin over a model's workers
}

// NewGauge registers kvrouter_tokenizer_mismatch on reg.
func NewGauge(reg prometheus.Registerer) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kvrouter_tokenizer_mismatch",
		Help: "1 when the router's token ids for the check's probes differ from an engine's (its KV-aware routing is then blind), 0 when they agree."},
		[]string{"model"})
	reg.MustRegister(g)
	return g
}

// Statuses returns the last check of every model, sorted by model.
func (c *Checker) Statuses() []Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Status, 0, len(c.status))
	for _, s := range c.status {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Status) int {
		if a.Model < b.Model {
			return -1
		}
		if a.Model > b.Model {
			return 1
		}
		return 0
	})
	return out
}

// Run checks every model when it first appears and then every c.Every,
// until ctx ends.
func (c *Checker) Run(ctx context.Context) {
	after := c.After
	if after == nil {
		after = time.After
	}
	for {
		c.Round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-after(min(poll, c.Every)):
		}
	}
}

// Round checks the models whose last check is older than c.Every, or that
// were never checked.
func (c *Checker) Round(ctx context.Context) {
	now := c.Now()
	for _, model := range c.Models() {
		c.mu.Lock()
		s, ok := c.status[model]
		c.mu.Unlock()
		if ok && now.Sub(s.CheckedAt) < c.Every {
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if s, ok := c.Check(ctx, model); ok {
			c.record(s)
		}
	}
}

func (c *Checker) record(s Status) {
	c.mu.Lock()
	if c.status == nil {
		c.status = map[string]Status{}
	}
	c.status[s.Model] = s
	c.mu.Unlock()
	if c.Mismatch != nil && s.Compared {
		v := 0.0
		if s.Mismatch {
			v = 1
		}
		c.Mismatch.WithLabelValues(s.Model).Set(v)
	}
}

// pick returns the model's next worker to ask, round robin.
func (c *Checker) pick(model string) (router.Worker, bool) {
	ws := c.Workers(model)
	if len(ws) == 0 {
		return router.Worker{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.next == nil {
		c.next = map[string]int{}
	}
	i := c.next[model] % len(ws)
	c.next[model] = i + 1
	return ws[i], true
}

// Check checks one model on one of its workers; ok is false when no
// worker serves it.
func (c *Checker) Check(ctx context.Context, model string) (Status, bool) {
	w, ok := c.pick(model)
	if !ok {
		return Status{}, false
	}
	s := Status{Model: model, Worker: w.ID, CheckedAt: c.Now(), ChatChecked: w.Engine != router.EngineSGLang}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := c.check(ctx, w, &s)
	s.Mismatch = len(s.Diffs) > 0
	switch {
	case err != nil && c.Local == nil:
		s.Error = err.Error()
		c.Log.Error("tokenizer check: the router tokenizes with the engines' POST /tokenize (--tokenizer engine), which does not answer, so requests are routed on load alone; give --tokenizer the model's tokenizer files (a tokenizer.json or model directory)",
			"model", model, "worker", w.ID, "err", err)
	case err != nil:
		s.Error = err.Error()
		c.Log.Error("tokenizer check failed", "model", model, "worker", w.ID, "err", err)
	}
	if c.Local == nil && !s.ChatChecked {
		c.Log.Warn("tokenizer check: SGLang's /tokenize does not render chats, so chat requests are routed on load alone; give --tokenizer the model's tokenizer files",
			"model", model, "worker", w.ID)
	}
	for _, d := range s.Diffs {
		args := []any{"model", model, "worker", w.ID, "probe", d.Probe, "position", d.At, "router_tokens", d.RouterLen, "engine_tokens", d.EngineLen}
		if d.RouterID != nil {
			args = append(args, "router_id", *d.RouterID)
		}
		if d.EngineID != nil {
			args = append(args, "engine_id", *d.EngineID)
		}
		c.Log.Error("tokenizer mismatch: the router's token ids differ from the engine's from this position on, so KV-aware routing finds no cached block past it; give --tokenizer the model's own tokenizer files (and --chat-template the engine's, if it has one)", args...)
	}
	return s, true
}

// check runs the probes on w.
func (c *Checker) check(ctx context.Context, w router.Worker, s *Status) error {
	prompt := ProbePrompt
	engine, err := frontdoor.AskTokenize(ctx, c.Client, w.URL, &frontdoor.TokenizeQuery{Model: s.Model, Prompt: &prompt, AddSpecialTokens: true})
	if err != nil {
		return fmt.Errorf("prompt: %w", err)
	}
	if c.Local == nil {
		return nil
	}
	s.Compared = true
	if d := compare("prompt", c.Local.Text(prompt, true), engine); d != nil {
		s.Diffs = append(s.Diffs, *d)
	}
	cr, _, err := frontdoor.ParseChat([]byte(probeChat))
	if err != nil {
		return err
	}
	text, local, err := c.Local.Chat(cr, false)
	if err != nil {
		if errors.Is(err, tokenizer.ErrNoChatTemplate) {
			return nil // chats are not the router's to render; it says so per request
		}
		return fmt.Errorf("chat: the router cannot render it: %w", err)
	}
	q := &frontdoor.TokenizeQuery{Model: s.Model, Messages: json.RawMessage(cr.Messages), AddGenerationPrompt: cr.AddGenerationPrompt}
	if !s.ChatChecked {
		q = &frontdoor.TokenizeQuery{Model: s.Model, Prompt: &text}
	}
	if engine, err = frontdoor.AskTokenize(ctx, c.Client, w.URL, q); err != nil {
		return fmt.Errorf("chat: %w", err)
	}
	if d := compare("chat", local, engine); d != nil {
		s.Diffs = append(s.Diffs, *d)
	}
	return nil
}
