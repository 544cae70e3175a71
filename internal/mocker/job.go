// This file holds a request's job: its placement, hinted pull, token stream and usage.

package mocker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"kvrouter/internal/hints"
)

// job is one request as the HTTP side sees it: the scheduler's sequence, the
// blocks its hint pulled, and the tokens delivered so far.
type job struct {
	seq    *Seq
	rank   *rank
	pull   pull
	source string    // the hint's or prefill's source, set when a block came from it
	kv     *transfer // the request's part in a disaggregated hand-over
	// report is what a hint's pull cost, set when it was attempted.
	report *pullUsage

	mu     sync.Mutex
	toks   []uint32
	done   bool
	ended  bool
	notify chan struct{}
}

func (j *job) push(tok uint32, done bool) {
	j.mu.Lock()
	j.toks = append(j.toks, tok)
	j.done = j.done || done
	j.mu.Unlock()
	select {
	case j.notify <- struct{}{}:
	default:
	}
}

// end releases what the job holds. Called once, with the rank's lock held.
func (j *job) end() {
	j.mu.Lock()
	if j.ended {
		j.mu.Unlock()
		return
	}
	j.ended = true
	j.mu.Unlock()
	j.pull.release()
	j.rank.cat.unpin(j.seq.Keys)
	j.rank.load.Add(-1)
	select {
	case j.notify <- struct{}{}:
	default:
	}
}

// next waits for tokens after the first have ones and returns them; done is
// set with the last.
func (j *job) next(ctx context.Context, have int) (toks []uint32, done bool, err error) {
	for {
		j.mu.Lock()
		toks, done = j.toks[have:], j.done
		ended := j.ended
		j.mu.Unlock()
		if len(toks) > 0 || done {
			return toks, done, nil
		}
		if ended {
			return nil, false, errAborted
		}
		select {
		case <-j.notify:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}

var errAborted = errors.New("request aborted")

// usage is the request's token accounting, with kvrouter's extension.
type usage struct {
	PromptTokens     int           `json:"prompt_tokens"`
	CompletionTokens int           `json:"completion_tokens"`
	TotalTokens      int           `json:"total_tokens"`
	Details          promptDetails `json:"prompt_tokens_details"`
	KVRouter         kvrUsage      `json:"kvrouter"`
}

type promptDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

type kvrUsage struct {
	PeerRestoredTokens int        `json:"peer_restored_tokens"`
	LocalCachedTokens  int        `json:"local_cached_tokens"`
	SourceEndpoint     *string    `json:"source_endpoint"`
	DPRank             int        `json:"dp_rank"`
	Pull               *pullUsage `json:"pull,omitempty"`
}

// pullUsage is what a hint's pull cost (docs/wire.md §6.7): the blocks it
// wanted beyond the rank's own prefix, those that came (a leading run), their
// bytes across every TP shard, and the wall time from the pull's start to its
// last block, setup included.
type pullUsage struct {
	SourceEndpoint string  `json:"source_endpoint"`
	WantedBlocks   int     `json:"wanted_blocks"`
	PulledBlocks   int     `json:"pulled_blocks"`
	PulledTokens   int     `json:"pulled_tokens"`
	Bytes          int64   `json:"bytes"`
	Seconds        float64 `json:"seconds"`
	Short          bool    `json:"short"`
	// ForeignBlocks counts hinted blocks that are not in the request's own
	// chain: a hint naming them is wrong (another tenant's, another
	// prompt's), and they are never pulled.
	ForeignBlocks int `json:"foreign_blocks"`
}

// usage is read once the sequence has finished prefill.
func (j *job) usage(completion int) usage {
	j.rank.mu.Lock()
	s := j.seq
	local, peer := s.GPUTokens+s.RunnerTokens, s.PeerTokens
	j.rank.mu.Unlock()
	u := usage{
		PromptTokens:     len(s.Tokens),
		CompletionTokens: completion,
		TotalTokens:      len(s.Tokens) + completion,
		Details:          promptDetails{CachedTokens: local + peer},
		KVRouter:         kvrUsage{PeerRestoredTokens: peer, LocalCachedTokens: local, DPRank: j.rank.id},
	}
	if peer > 0 {
		src := j.source
		u.KVRouter.SourceEndpoint = &src
	}
	u.KVRouter.Pull = j.report
	return u
}

// request is a parsed inference request, ready to schedule.
type request struct {
	tokens    []uint32
	maxTokens int
	salt      string
	lora      string // the LoRA adapter, "" for the base model
	dpRank    *int
	hint      []byte // raw hint JSON as found in the body, nil when none
	// kv is the request's part in a disaggregated hand-over; nil for a
	// whole request.
	kv *transfer
}

// start places req on a rank, pulls what its hint names, and queues it.
func (e *Engine) start(ctx context.Context, req request) (*job, error) {
	r, err := e.pickRank(req.dpRank)
	if err != nil {
		return nil, err
	}
	r.load.Add(1)
	id := e.nonce + "-" + strconv.FormatUint(e.reqSeq.Add(1), 10)
	seq := &Seq{
		ID:        id,
		Tokens:    req.tokens,
		Keys:      e.cfg.engineHashes(req.tokens, req.salt, req.lora),
		Seeds:     contentSeeds(req.tokens, e.cfg.BlockSize, req.lora),
		Salt:      req.salt,
		LoRA:      req.lora,
		MaxTokens: req.maxTokens,
	}
	j := &job{seq: seq, rank: r, notify: make(chan struct{}, 1), kv: req.kv}
	r.cat.pin(seq, e.cfg.BlockSize)
	seq.Export = req.kv != nil && req.kv.export
	switch {
	case req.kv != nil && !req.kv.export:
		// A decode leg pulls from its prefill engine; a hint would name
		// another source for the same blocks.
		if err := e.receive(ctx, j, req.kv); err != nil {
			r.mu.Lock()
			j.end()
			r.mu.Unlock()
			return nil, err
		}
	case req.hint != nil:
		e.applyHint(ctx, j, req.hint)
	default:
		e.metrics.hint(outcomeNone)
	}
	if err := r.submit(j); err != nil {
		r.mu.Lock()
		j.end()
		r.mu.Unlock()
		return nil, err
	}
	return j, nil
}

// applyHint pulls the hinted blocks beyond what the rank holds itself from
// the hint's source. Whatever fails is recomputed: a hint never fails a
// request.
func (e *Engine) applyHint(ctx context.Context, j *job, raw []byte) {
	parsed, err := hints.Parse(raw)
	if err != nil {
		e.log.Debug("ignoring malformed hint", "request", j.seq.ID, "err", err)
		e.metrics.hint(outcomeInvalid)
		return
	}
	for _, w := range parsed.Warnings {
		e.log.Debug("hint accepted with a warning", "request", j.seq.ID, "warning", w)
	}
	e.metrics.hint(e.pullPeer(ctx, j, parsed.Hint.Endpoint, parsed.Hint.BlockHashes))
}

// pullPeer pulls the named blocks beyond what j's rank holds itself (the
// run of them that continues its prefix) from the peer runner at source,
// and says how it went: local, restored, partial or failed. Whatever fails
// is recomputed. What the pull cost is left in j.report for the answer's
// usage.
func (e *Engine) pullPeer(ctx context.Context, j *job, source string, keys []uint64) string {
	r, seq := j.rank, j.seq
	hinted := make(map[uint64]bool, len(keys))
	for _, k := range keys {
		hinted[k] = true
	}
	own := make(map[uint64]bool, len(seq.Keys))
	for _, k := range seq.Keys {
		own[k] = true
	}
	foreign := 0
	for k := range hinted {
		if !own[k] {
			foreign++
		}
	}
	r.mu.Lock()
	limit := r.sched.cacheable(seq)
	gpu, lower := r.sched.LocalPrefix(seq.Keys, limit)
	r.mu.Unlock()
	var want []uint64
	for _, k := range seq.Keys[gpu+lower : limit] {
		if !hinted[k] {
			break
		}
		want = append(want, k)
	}
	if len(want) == 0 {
		if foreign > 0 {
			j.report = &pullUsage{SourceEndpoint: source, ForeignBlocks: foreign}
		}
		return outcomeLocal
	}
	// The histogram measures the pull as the request sees it: the
	// simulated setup (wall time = simulated / Speedup) then the real
	// transfer.
	start := time.Now()
	j.report = &pullUsage{SourceEndpoint: source, WantedBlocks: len(want), Short: true, ForeignBlocks: foreign}
	if !e.pullSetup(ctx) {
		// Cancelled during the setup: nothing pulled, all recomputed (if
		// the request still runs at all).
		j.report.Seconds = time.Since(start).Seconds()
		e.metrics.pullSeconds.Observe(j.report.Seconds)
		return outcomeFailed
	}
	p := r.tier.fetch(ctx, seq.ID, source, want)
	j.report.Seconds = time.Since(start).Seconds()
	e.metrics.pullSeconds.Observe(j.report.Seconds)
	j.report.PulledBlocks, j.report.Short = len(p.keys), len(p.keys) < len(want)
	j.report.PulledTokens = len(p.keys) * e.cfg.BlockSize
	j.report.Bytes = int64(len(p.keys)) * int64(e.cfg.blockBytes())
	j.pull = p
	if len(p.keys) > 0 {
		j.source = source
		seq.PeerKeys = make(map[uint64]bool, len(p.keys))
		for _, k := range p.keys {
			seq.PeerKeys[k] = true
		}
	}
	if p.err != nil {
		e.log.Debug("peer pull incomplete; recomputing the rest", "request", seq.ID,
			"source", source, "pulled", len(p.keys), "wanted", len(want), "err", p.err)
	}
	switch {
	case len(p.keys) == len(want):
		return outcomeRestored
	case len(p.keys) > 0:
		return outcomePartial
	}
	return outcomeFailed
}

// pullSetup waits out the simulated fixed cost of a peer pull on the
// engine's clock; false when ctx ended first.
func (e *Engine) pullSetup(ctx context.Context) bool {
	d := time.Duration(float64(e.pullSetupNS.Load()) / e.cfg.Speedup)
	if d <= 0 {
		return true
	}
	select {
	case <-e.cfg.Clock.After(d):
		return true
	case <-ctx.Done():
		return false
	}
}

// pickRank honours an explicit rank, else takes the least loaded.
func (e *Engine) pickRank(want *int) (*rank, error) {
	if want != nil {
		if *want < 0 || *want >= len(e.ranks) {
			return nil, fmt.Errorf("%w: dp_rank %d is outside 0..%d", errBadRequest, *want, len(e.ranks)-1)
		}
		return e.ranks[*want], nil
	}
	best := e.ranks[0]
	for _, r := range e.ranks[1:] {
		if r.load.Load() < best.load.Load() {
			best = r
		}
	}
	return best, nil
}
