// This file holds the seed scenario: a hinted prefix pulled from worker A's runner into worker B.

package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"time"

	"kvrouter/internal/cluster"
)

// The seed scenario replays the upstream validation of peer restores on
// our stack. Its sizes are the upstream ones: 64-token blocks and a
// 2,000-token prompt, of which 31 full blocks (1,984 tokens) can be pulled.
const (
	SeedBlockSize   = 64
	SeedPromptLen   = 2000
	SeedMinRestored = SeedPromptLen / SeedBlockSize * SeedBlockSize
	seedMaxTokens   = 16
	// seedWait bounds each wait for the router's index to catch up with
	// the engines' events; it is a safety net, not a timing assertion.
	seedWait = 15 * time.Second
	seedPoll = 20 * time.Millisecond
	// Token ids above the byte tokens and below the demo tokenizer's
	// special tokens (782..788) are plain text on every engine.
	seedVocabLo, seedVocabHi = 256, 782
)

// SeedOptions configure the seed scenario.
type SeedOptions struct {
	Binary  string // kvrouter executable; empty re-executes this one
	Flavor  string // sglang (default) or vllm
	LogDir  string
	Logger  *slog.Logger
	Timeout time.Duration // cluster readiness; 0 is the cluster default
}

// SeedResult is the scenario's verdict, printed as JSON.
type SeedResult struct {
	RestoredTokens        int             `json:"restored_tokens"`
	OutputMatch           bool            `json:"output_match"`
	PeerHintAfterEviction bool            `json:"peer_hint_after_eviction"`
	Hint                  json.RawMessage `json:"hint"`
	Steps                 []Step          `json:"steps"`
}

// Step is one checked step of a scenario.
type Step struct {
	Step   string  `json:"step"`
	OK     bool    `json:"ok"`
	MS     float64 `json:"ms"`
	Detail any     `json:"detail"`
}

// OK is the scenario's pass condition: B restored the hinted prefix from A
// with the same output, no hint names a peer after the eviction, and every
// step checked out.
func (r SeedResult) OK() bool {
	if r.RestoredTokens < SeedMinRestored || !r.OutputMatch || r.PeerHintAfterEviction {
		return false
	}
	for _, s := range r.Steps {
		if !s.OK {
			return false
		}
	}
	return len(r.Steps) > 0
}

// routeView is the part of POST /debug/route the scenario reads.
type routeView struct {
	Target struct {
		WorkerID string `json:"worker_id"`
	} `json:"target"`
	Candidates []struct {
		WorkerID      string `json:"worker_id"`
		OverlapBlocks int    `json:"overlap_blocks"`
	} `json:"candidates"`
	Hint         json.RawMessage `json:"hint"`
	HintDecision struct {
		Reason string `json:"reason"`
		Reach  int    `json:"reach"`
	} `json:"hint_decision"`
	Blocks int `json:"blocks"`
}

func (v routeView) hinted() bool { return len(v.Hint) > 0 && string(v.Hint) != "null" }

// fetchPayload reads the kv.fetch action of a hint in either placement
// form (the envelope or the older flat object).
type fetchPayload struct {
	Source string   `json:"source_control_endpoint"`
	Blocks []uint64 `json:"block_hashes"`
}

func hintPayload(raw json.RawMessage) (fetchPayload, error) {
	var env struct {
		Actions []struct {
			ActionType string       `json:"action_type"`
			Payload    fetchPayload `json:"payload"`
		} `json:"actions"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return fetchPayload{}, err
	}
	for _, a := range env.Actions {
		if a.ActionType == "kv.fetch" {
			return a.Payload, nil
		}
	}
	var flat fetchPayload
	if err := json.Unmarshal(raw, &flat); err != nil || flat.Source == "" {
		return fetchPayload{}, fmt.Errorf("no kv.fetch action in hint %s", raw)
	}
	return flat, nil
}

// seedPrompt is a fixed prompt of SeedPromptLen token ids.
func seedPrompt() []uint32 {
	r := rand.New(rand.NewPCG(2026, 5))
	p := make([]uint32, SeedPromptLen)
	for i := range p {
		p[i] = seedVocabLo + uint32(r.IntN(seedVocabHi-seedVocabLo))
	}
	return p
}

// seedRun is one run of the scenario against a started cluster.
type seedRun struct {
	c      *cluster.Cluster
	a, b   cluster.Engine
	router string
	admin  string // the router's operator views
	prompt []uint32
	body   map[string]any
	res    SeedResult
}

// Seed starts two workers A and B and runs the scenario. The error is for
// a scenario that could not run at all; a failed check shows in the result.
func Seed(ctx context.Context, o SeedOptions) (SeedResult, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	start := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{
		Binary: o.Binary, Engines: 2, WorkerIDs: []string{"A", "B"}, Flavor: o.Flavor,
		BlockSize: SeedBlockSize, KVBytesPerToken: 1024,
		// Upstream's selection rule alone: any longer peer prefix is hinted.
		RouterFlags: [][]string{{"--allow-target-override"}},
		// Logs go only once the scenario passed: a failed check is no
		// failure of the cluster's, yet its logs tell why.
		LogDir: o.LogDir, KeepLogs: true,
		ReadyTimeout: o.Timeout, Logger: log,
	})
	if err != nil {
		return SeedResult{}, err
	}
	r := &seedRun{c: c, a: c.Engines()[0], b: c.Engines()[1], router: c.RouterURL(), admin: c.RouterAdminURL(), prompt: seedPrompt()}
	r.body = map[string]any{"model": cluster.Model, "prompt": r.prompt, "max_tokens": seedMaxTokens, "temperature": 0}
	r.step("start_cluster", start, true, map[string]any{"router": r.router, "A": r.a.ControlEndpoint(0),
		"B": r.b.ControlEndpoint(0), "log_dir": c.LogDir()})
	r.run(ctx)
	if err := c.Stop(); err != nil {
		r.step("stop_cluster", time.Now(), false, err.Error())
	}
	if r.res.OK() && o.LogDir == "" {
		os.RemoveAll(c.LogDir())
	}
	return r.res, nil
}

func (r *seedRun) step(name string, since time.Time, ok bool, detail any) {
	r.res.Steps = append(r.res.Steps, Step{Step: name, OK: ok,
		MS: float64(time.Since(since).Microseconds()) / 1e3, Detail: detail})
}

func (r *seedRun) fail(name string, since time.Time, err error) {
	r.step(name, since, false, err.Error())
}

// run performs the steps in order and stops at the first one that leaves
// nothing to check further.
func (r *seedRun) run(ctx context.Context) {
	onA, ok := r.send(ctx, "prefill_on_A", "A", func(c completion) bool {
		return c.Usage.PromptTokens == SeedPromptLen && c.text() != ""
	})
	if !ok {
		return
	}
	if !r.awaitHint(ctx) {
		return
	}
	onB, ok := r.send(ctx, "restore_on_B", "B", func(c completion) bool {
		return c.Usage.KVRouter.SourceEndpoint != nil && *c.Usage.KVRouter.SourceEndpoint == r.a.ControlEndpoint(0)
	})
	r.res.RestoredTokens = onB.Usage.KVRouter.PeerRestoredTokens
	r.res.OutputMatch = ok && onB.text() == onA.text()
	if !ok {
		return
	}
	if !r.evict(ctx) {
		return
	}
	r.res.PeerHintAfterEviction = r.awaitNoHint(ctx)
	r.send(ctx, "recompute_on_B", "B", func(c completion) bool {
		k := c.Usage.KVRouter
		return k.PeerRestoredTokens == 0 && k.LocalCachedTokens == 0 && c.text() == onA.text()
	})
}

// send posts the prompt through the router forced to worker target.
func (r *seedRun) send(ctx context.Context, name, target string, check func(completion) bool) (completion, bool) {
	t := time.Now()
	var c completion
	h, err := cluster.PostJSON(ctx, r.router+pathComplete, target, r.body, &c)
	if err != nil {
		r.fail(name, t, err)
		return c, false
	}
	c.worker = h.Get(headerWorker)
	k := c.Usage.KVRouter
	ok := c.worker == target && check(c)
	r.step(name, t, ok, map[string]any{"worker": c.worker, "prompt_tokens": c.Usage.PromptTokens,
		"local_cached_tokens": k.LocalCachedTokens, "peer_restored_tokens": k.PeerRestoredTokens,
		"source_endpoint": k.SourceEndpoint, "text": c.text()})
	return c, ok
}

func (r *seedRun) route(ctx context.Context) (routeView, error) {
	var v routeView
	_, err := cluster.PostJSON(ctx, r.admin+pathRoute, "B", r.body, &v)
	return v, err
}

// awaitHint polls the decision for the prompt forced to B until A's
// inventory has reached the router in full: a hint covering every full
// block, which must name A's runner.
func (r *seedRun) awaitHint(ctx context.Context) bool {
	t := time.Now()
	want := SeedPromptLen / SeedBlockSize
	var v routeView
	var p fetchPayload
	err := poll(ctx, func() (bool, error) {
		var err error
		if v, err = r.route(ctx); err != nil || !v.hinted() {
			return false, err
		}
		if p, err = hintPayload(v.Hint); err != nil {
			return false, err
		}
		return len(p.Blocks) >= want, nil
	})
	if v.hinted() {
		r.res.Hint = v.Hint
	}
	detail := map[string]any{"reason": v.HintDecision.Reason, "reach": v.HintDecision.Reach,
		"source_control_endpoint": p.Source, "block_hashes": len(p.Blocks), "want_source": r.a.ControlEndpoint(0)}
	if err != nil {
		detail["error"] = err.Error()
	}
	ok := err == nil && p.Source == r.a.ControlEndpoint(0) && v.Target.WorkerID == "B"
	r.step("router_hint_for_B", t, ok, detail)
	return ok
}

type evicted struct {
	GPU    int `json:"gpu"`
	Runner int `json:"runner"`
}

// evict drops the prompt's blocks from A's GPU pool and runner, and from
// B's, which holds them since its restore.
func (r *seedRun) evict(ctx context.Context) bool {
	t := time.Now()
	body := map[string]any{"tier": "all", "tokens": r.prompt}
	var a, b evicted
	_, errA := cluster.PostJSON(ctx, r.a.URL+pathEvict, "", body, &a)
	_, errB := cluster.PostJSON(ctx, r.b.URL+pathEvict, "", body, &b)
	full := SeedPromptLen / SeedBlockSize
	if errA != nil || errB != nil {
		r.fail("evict_A_and_B", t, fmt.Errorf("A: %v; B: %v", errA, errB))
		return false
	}
	ok := a.GPU >= full && a.Runner >= full && b.GPU >= full
	r.step("evict_A_and_B", t, ok, map[string]any{"A": a, "B": b})
	return ok
}

// awaitNoHint polls the decision for the prompt forced to B until the
// removals have reached the router (no candidate holds any block) and it
// carries no hint. It reports whether the last decision seen has a hint.
func (r *seedRun) awaitNoHint(ctx context.Context) bool {
	t := time.Now()
	var v routeView
	err := poll(ctx, func() (bool, error) {
		var err error
		if v, err = r.route(ctx); err != nil {
			return false, err
		}
		for _, c := range v.Candidates {
			if c.OverlapBlocks > 0 {
				return false, nil
			}
		}
		return !v.hinted(), nil
	})
	detail := map[string]any{"hint": v.Hint, "reason": v.HintDecision.Reason}
	if err != nil {
		detail["error"] = err.Error()
	}
	r.step("no_hint_after_eviction", t, err == nil && !v.hinted(), detail)
	return v.hinted()
}

// poll calls cond until it holds, fails, or seedWait passes.
func poll(ctx context.Context, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, seedWait)
	defer cancel()
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
			}
			return fmt.Errorf("not reached within %v: %w", seedWait, ctx.Err())
		case <-time.After(seedPoll):
		}
	}
}
