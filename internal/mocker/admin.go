// This file holds the engine's side endpoints: models, /tokenize, config, admin evict and reset.

package mocker

import (
	"bytes"
	"net/http"
	"time"
)

type modelList struct {
	Object string      `json:"object"`
	Data   []modelCard `json:"data"`
}

type modelCard struct {
	ID          string  `json:"id"`
	Object      string  `json:"object"`
	Created     int64   `json:"created"`
	OwnedBy     string  `json:"owned_by"`
	Root        string  `json:"root"`
	Parent      *string `json:"parent"`
	MaxModelLen int     `json:"max_model_len"`
}

func (e *Engine) handleModels(w http.ResponseWriter, _ *http.Request) {
	created := e.cfg.Clock.Now().Unix()
	cards := []modelCard{{ID: e.cfg.Model, Object: objectModel, Created: created, OwnedBy: ownedBy,
		Root: e.cfg.Model, MaxModelLen: e.cfg.MaxModelLen}}
	// LoRA adapters as vLLM lists them: the base model as their parent.
	for _, a := range e.cfg.LoRAs {
		cards = append(cards, modelCard{ID: a, Object: objectModel, Created: created, OwnedBy: ownedBy,
			Root: a, Parent: &e.cfg.Model, MaxModelLen: e.cfg.MaxModelLen})
	}
	writeJSON(w, http.StatusOK, modelList{Object: objectList, Data: cards})
}

// tokenizeResponse follows vLLM's /tokenize.
type tokenizeResponse struct {
	Count       int      `json:"count"`
	MaxModelLen int      `json:"max_model_len"`
	Tokens      []uint32 `json:"tokens"`
	TokenStrs   []string `json:"token_strs"`
}

func (e *Engine) handleTokenize(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	tokens, err := e.parser().tokenize(body)
	if err != nil {
		writeError(w, err)
		return
	}
	if tokens == nil {
		tokens = []uint32{}
	}
	writeJSON(w, http.StatusOK, tokenizeResponse{Count: len(tokens), MaxModelLen: e.cfg.MaxModelLen, Tokens: tokens})
}

type evictResponse struct {
	GPU    int `json:"gpu"`
	Runner int `json:"runner"`
}

// handleEvict drops the named blocks (or all) from the chosen tiers of one
// rank or all, publishing the removals as the engine would.
func (e *Engine) handleEvict(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	req, err := e.parser().evict(body)
	if err != nil {
		writeError(w, err)
		return
	}
	ranks, err := e.ranksFor(req.dpRank)
	if err != nil {
		writeError(w, err)
		return
	}
	var out evictResponse
	for _, rk := range ranks {
		g, n := rk.evict(req.keys, req.gpu, req.runner)
		out.GPU += g
		out.Runner += n
	}
	writeJSON(w, http.StatusOK, out)
}

// handleReset empties every cache of every rank: AllBlocksCleared for the
// GPU tier, a removal for each runner-owned block.
func (e *Engine) handleReset(w http.ResponseWriter, _ *http.Request) {
	var out evictResponse
	for _, rk := range e.ranks {
		g, n := rk.reset()
		out.GPU += g
		out.Runner += n
	}
	writeJSON(w, http.StatusOK, out)
}

func (e *Engine) ranksFor(d *int) ([]*rank, error) {
	if d == nil {
		return e.ranks, nil
	}
	if *d < 0 || *d >= len(e.ranks) {
		return nil, badRequest("dp_rank %d is outside 0..%d", *d, len(e.ranks)-1)
	}
	return e.ranks[*d : *d+1], nil
}

func (e *Engine) handleConfig(w http.ResponseWriter, _ *http.Request) {
	if e.cfg.Flavor == SGLang {
		writeJSON(w, http.StatusOK, e.serverInfo())
		return
	}
	writeJSON(w, http.StatusOK, e.engineArgs())
}

// pullKnobs are the pull costs POST /admin/pull sets at run time.
type pullKnobs struct {
	SetupMS *float64 `json:"setup_ms"`
}

// handlePull reports (GET) or changes (POST {"setup_ms": N}) the simulated
// fixed cost of a peer pull, --pull-setup-ms, so that a test can make a
// fleet's pulls turn slow while it serves.
func (e *Engine) handlePull(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		body, err := readBody(w, r)
		if err != nil {
			writeError(w, err)
			return
		}
		var k pullKnobs
		if len(bytes.TrimSpace(body)) > 0 {
			if err := decodeBody(body, &k); err != nil {
				writeError(w, err)
				return
			}
		}
		if k.SetupMS != nil {
			if *k.SetupMS < 0 || *k.SetupMS > 3.6e6 {
				writeError(w, badRequest("setup_ms: %v is outside 0..3600000", *k.SetupMS))
				return
			}
			e.pullSetupNS.Store(int64(*k.SetupMS * float64(time.Millisecond)))
			e.log.Info("pull setup changed", "setup_ms", *k.SetupMS)
		}
	}
	ms := float64(e.pullSetupNS.Load()) / float64(time.Millisecond)
	writeJSON(w, http.StatusOK, pullKnobs{SetupMS: &ms})
}
