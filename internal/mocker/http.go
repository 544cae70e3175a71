// This file holds the OpenAI API: routes, completions and chat answered whole or streamed.

package mocker

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// maxBody bounds a request body: far above a max-model-len prompt as JSON.
const maxBody = 16 << 20

// Handler returns the engine's HTTP API.
func (e *Engine) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+pathCompletions, func(w http.ResponseWriter, r *http.Request) { e.generate(w, r, false) })
	mux.HandleFunc("POST "+pathChat, func(w http.ResponseWriter, r *http.Request) { e.generate(w, r, true) })
	mux.HandleFunc("GET "+pathModels, e.handleModels)
	mux.HandleFunc("POST "+pathTokenize, e.handleTokenize)
	mux.HandleFunc("GET "+pathHealth, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.Handle("GET "+pathMetrics, promhttp.HandlerFor(e.metrics.reg, promhttp.HandlerOpts{}))
	if e.cfg.Flavor == SGLang {
		mux.HandleFunc("GET "+pathServerInfo, e.handleConfig)
	} else {
		mux.HandleFunc("GET "+pathEngineArgs, e.handleConfig)
	}
	mux.HandleFunc("POST "+pathKVRelease, e.pd.handleRelease)
	mux.HandleFunc("POST "+pathAdminEvict, e.handleEvict)
	mux.HandleFunc("POST "+pathAdminReset, e.handleReset)
	mux.HandleFunc("GET "+pathAdminPull, e.handlePull)
	mux.HandleFunc("POST "+pathAdminPull, e.handlePull)
	mux.HandleFunc("GET "+pathAdminInventory, e.handleInventory)
	return mux
}

func (e *Engine) parser() *parser { return &parser{cfg: &e.cfg, model: e.model} }

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return nil, badRequest("reading the body: %v", err)
	}
	return body, nil
}

type apiError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    int     `json:"code"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, err error) {
	var a apiError
	a.Error.Message = err.Error()
	switch {
	case errors.Is(err, errModelNotFound):
		a.Error.Code, a.Error.Type = http.StatusNotFound, errNotFound
	case errors.Is(err, errBadRequest), errors.Is(err, ErrTooLarge):
		a.Error.Code, a.Error.Type = http.StatusBadRequest, errInvalidReq
	default:
		a.Error.Code, a.Error.Type = http.StatusInternalServerError, errServer
	}
	writeJSON(w, a.Error.Code, a)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set(headerContentType, contentJSON)
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// Response shapes of the OpenAI completions and chat APIs.
type (
	completionResponse struct {
		ID      string             `json:"id"`
		Object  string             `json:"object"`
		Created int64              `json:"created"`
		Model   string             `json:"model"`
		Choices []completionChoice `json:"choices"`
		Usage   *usage             `json:"usage,omitempty"`
		// KVTransferParams is a vLLM prefill leg's answer to its decode leg.
		KVTransferParams json.RawMessage `json:"kv_transfer_params,omitempty"`
	}
	completionChoice struct {
		Index        int     `json:"index"`
		Text         string  `json:"text"`
		Logprobs     any     `json:"logprobs"`
		FinishReason *string `json:"finish_reason"`
	}
	chatResponse struct {
		ID      string       `json:"id"`
		Object  string       `json:"object"`
		Created int64        `json:"created"`
		Model   string       `json:"model"`
		Choices []chatChoice `json:"choices"`
		Usage   *usage       `json:"usage,omitempty"`
		// KVTransferParams is a vLLM prefill leg's answer to its decode leg.
		KVTransferParams json.RawMessage `json:"kv_transfer_params,omitempty"`
	}
	chatChoice struct {
		Index        int      `json:"index"`
		Message      *chatOut `json:"message,omitempty"`
		Delta        *chatOut `json:"delta,omitempty"`
		Logprobs     any      `json:"logprobs"`
		FinishReason *string  `json:"finish_reason"`
	}
	chatOut struct {
		Role    string  `json:"role,omitempty"`
		Content *string `json:"content,omitempty"`
	}
)

// generate serves /v1/completions (chat false) and /v1/chat/completions.
func (e *Engine) generate(w http.ResponseWriter, r *http.Request, chat bool) {
	body, err := readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	p := e.parser()
	var req parsed
	if chat {
		req, err = p.chat(body)
	} else {
		req, err = p.completion(body)
	}
	if err == nil {
		// The router names the rank in headers; a client's body field must
		// not override its choice.
		var h *int
		if h, err = headerRank(r, e.cfg.Flavor); h != nil {
			req.dpRank = h
		}
	}
	if err != nil {
		writeError(w, err)
		return
	}
	j, err := e.start(r.Context(), req.request)
	if err != nil {
		writeError(w, err)
		return
	}
	o := output{e: e, j: j, chat: chat, created: e.cfg.Clock.Now().Unix()}
	if chat {
		o.id = idPrefixChat + j.seq.ID
	} else {
		o.id = idPrefixCmpl + j.seq.ID
	}
	if req.stream {
		o.stream(w, r, req.includeUsage)
	} else {
		o.whole(w, r)
	}
}

// headerRank reads the rank a router named: kvrouter's header, else (vLLM)
// vLLM's own.
func headerRank(r *http.Request, f Flavor) (*int, error) {
	name := headerDPRank
	h := r.Header.Get(name)
	if h == "" && f == VLLM {
		name = headerVLLMDPRank
		h = r.Header.Get(name)
	}
	if h == "" {
		return nil, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(h))
	if err != nil {
		return nil, badRequest("header %s: %q is not a rank", name, h)
	}
	return &n, nil
}

// output writes one request's answer.
type output struct {
	e       *Engine
	j       *job
	chat    bool
	id      string
	created int64
}

// whole answers once the last token is out.
func (o *output) whole(w http.ResponseWriter, r *http.Request) {
	var toks []uint32
	for {
		more, done, err := o.j.next(r.Context(), len(toks))
		if err != nil {
			o.j.rank.abort(o.j)
			if !errors.Is(err, errAborted) {
				return // the client is gone
			}
			writeError(w, err)
			return
		}
		toks = append(toks, more...)
		if done {
			break
		}
	}
	text := o.e.tok.Decode(toks)
	u := o.j.usage(len(toks))
	params := o.export()
	finish := finishLength
	if o.chat {
		writeJSON(w, http.StatusOK, chatResponse{
			ID: o.id, Object: objectChat, Created: o.created, Model: o.e.cfg.Model, Usage: &u, KVTransferParams: params,
			Choices: []chatChoice{{Message: &chatOut{Role: roleAssistant, Content: &text}, FinishReason: &finish}},
		})
		return
	}
	writeJSON(w, http.StatusOK, completionResponse{
		ID: o.id, Object: objectCompletion, Created: o.created, Model: o.e.cfg.Model, Usage: &u, KVTransferParams: params,
		Choices: []completionChoice{{Text: text, FinishReason: &finish}},
	})
}

// export keeps a prefill leg's blocks for its decode engine, once its
// prefill is done, and returns what the answer carries to it (vLLM).
func (o *output) export() json.RawMessage {
	if o.j.kv == nil || !o.j.kv.export {
		return nil
	}
	return o.e.exportParams(o.j, o.j.kv)
}

// stream answers with server-sent events, a chunk per token. A failed write
// means the client went away: the request is aborted and its blocks freed.
func (o *output) stream(w http.ResponseWriter, r *http.Request, includeUsage bool) {
	flusher, _ := w.(http.Flusher)
	w.Header().Set(headerContentType, contentSSE)
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	send := func(v any) bool {
		b, err := json.Marshal(v)
		if err != nil {
			return false
		}
		if _, err := io.WriteString(w, sseData+string(b)+"\n\n"); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	if o.chat && !send(o.chatChunk(&chatOut{Role: roleAssistant, Content: new(string)}, nil)) {
		o.j.rank.abort(o.j)
		return
	}
	n := 0
	for {
		more, done, err := o.j.next(r.Context(), n)
		if err != nil {
			o.j.rank.abort(o.j)
			return
		}
		for _, t := range more {
			text := o.e.vocab.textOf(t)
			var chunk any
			if o.chat {
				chunk = o.chatChunk(&chatOut{Content: &text}, nil)
			} else {
				chunk = o.completionChunk(text, nil)
			}
			if !send(chunk) {
				o.j.rank.abort(o.j)
				return
			}
		}
		n += len(more)
		if done {
			break
		}
	}
	params := o.export()
	finish := finishLength
	last := o.completionChunk("", &finish)
	last.KVTransferParams = params
	var lastChunk any = last
	if o.chat {
		c := o.chatChunk(&chatOut{}, &finish)
		c.KVTransferParams = params
		lastChunk = c
	}
	if !send(lastChunk) {
		return
	}
	if includeUsage {
		u := o.j.usage(n)
		var chunk any = completionResponse{ID: o.id, Object: objectCompletion, Created: o.created, Model: o.e.cfg.Model, Choices: []completionChoice{}, Usage: &u}
		if o.chat {
			chunk = chatResponse{ID: o.id, Object: objectChatChunk, Created: o.created, Model: o.e.cfg.Model, Choices: []chatChoice{}, Usage: &u}
		}
		if !send(chunk) {
			return
		}
	}
	_, _ = io.WriteString(w, sseDone)
	if flusher != nil {
		flusher.Flush()
	}
}

func (o *output) completionChunk(text string, finish *string) completionResponse {
	return completionResponse{ID: o.id, Object: objectCompletion, Created: o.created, Model: o.e.cfg.Model,
		Choices: []completionChoice{{Text: text, FinishReason: finish}}}
}

func (o *output) chatChunk(delta *chatOut, finish *string) chatResponse {
	return chatResponse{ID: o.id, Object: objectChatChunk, Created: o.created, Model: o.e.cfg.Model,
		Choices: []chatChoice{{Delta: delta, FinishReason: finish}}}
}
