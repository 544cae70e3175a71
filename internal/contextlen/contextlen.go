// This file holds the poller that asks each worker for its context length.

package contextlen

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"kvrouter/internal/router"
)

// Defaults of Poller's pacing.
const (
	DefaultEvery   = 5 * time.Second
	DefaultTimeout = 2 * time.Second
	// retryUnknown is how soon a worker that reported nothing is asked
	// again; refreshKnown, one that did (an engine restarted with another
	// --max-model-len keeps its URL).
	retryUnknown = 30 * time.Second
	refreshKnown = 10 * time.Minute
	// maxAnswer bounds what is read of an answer.
	maxAnswer = 1 << 20
)

// Poller asks every worker the router knows for its context length.
type Poller struct {
	Router *router.Router
	Client *http.Client
	// Every is how often the worker list is looked at; Timeout bounds one
	// worker's answers.
	Every, Timeout time.Duration
	Log            *slog.Logger

	mu    sync.Mutex
	known map[string]entry // by worker id
}

// entry is what one worker reported.
type entry struct {
	url, model string
	tokens     int // 0: nothing reported
	next       time.Time
}

// MaxModelLen is the longest context a worker of model reported, 0 when
// one of them reported none: a prompt that may fit one worker is not
// refused.
func (p *Poller) MaxModelLen(model string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, e := range p.known {
		if e.model != model {
			continue
		}
		if e.tokens == 0 {
			return 0
		}
		n = max(n, e.tokens)
	}
	return n
}

// Run asks workers until ctx ends.
func (p *Poller) Run(ctx context.Context) {
	every := p.Every
	if every <= 0 {
		every = DefaultEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		p.Poll(ctx, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Poll asks the workers that are new, changed or due, at once.
func (p *Poller) Poll(ctx context.Context, now time.Time) {
	ws := p.Router.AllWorkers()
	p.mu.Lock()
	if p.known == nil {
		p.known = map[string]entry{}
	}
	present := make(map[string]bool, len(ws))
	var due []router.Worker
	for _, w := range ws {
		present[w.ID] = true
		e, ok := p.known[w.ID]
		if !ok || e.url != w.URL || e.model != w.Model || !now.Before(e.next) {
			due = append(due, w)
		}
	}
	for id := range p.known {
		if !present[id] {
			delete(p.known, id)
		}
	}
	p.mu.Unlock()
	// Workers behind one URL (a fleet behind a balancer) are asked once.
	type key struct{ url, model string }
	ids := map[key][]string{}
	for _, w := range due {
		k := key{w.URL, w.Model}
		ids[k] = append(ids[k], w.ID)
	}
	var wg sync.WaitGroup
	for k, of := range ids {
		wg.Go(func() {
			n, err := p.ask(ctx, k.url, k.model)
			e := entry{url: k.url, model: k.model, tokens: n, next: now.Add(refreshKnown)}
			if n == 0 {
				e.next = now.Add(retryUnknown)
				if p.Log != nil && ctx.Err() == nil {
					p.Log.Debug("context length unknown: prompts for it are not bounded by the context", "url", k.url, "model", k.model, "err", err)
				}
			}
			p.mu.Lock()
			for _, id := range of {
				p.known[id] = e
			}
			p.mu.Unlock()
		})
	}
	wg.Wait()
}

// ask reads a worker's context length for model: its /v1/models card, else
// SGLang's /get_server_info.
func (p *Poller) ask(ctx context.Context, base, model string) (int, error) {
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	base = strings.TrimRight(base, "/")
	var models struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen *int   `json:"max_model_len"`
		} `json:"data"`
	}
	errModels := p.get(ctx, base+"/v1/models", &models)
	if errModels == nil {
		for _, c := range models.Data {
			if (c.ID == model || len(models.Data) == 1) && c.MaxModelLen != nil && *c.MaxModelLen > 0 {
				return *c.MaxModelLen, nil
			}
		}
	}
	var info struct {
		ContextLength *int `json:"context_length"`
	}
	errInfo := p.get(ctx, base+"/get_server_info", &info)
	if errInfo == nil && info.ContextLength != nil && *info.ContextLength > 0 {
		return *info.ContextLength, nil
	}
	return 0, fmt.Errorf("neither /v1/models max_model_len (%v) nor /get_server_info context_length (%v)", errModels, errInfo)
}

func (p *Poller) get(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := p.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", resp.Status)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, maxAnswer)).Decode(v)
}
