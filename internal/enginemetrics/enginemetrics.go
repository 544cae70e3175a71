// This file holds the poller of engines' /metrics and the reading of their load per rank.

package enginemetrics

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"kvrouter/internal/promtext"
	"kvrouter/internal/router"
)

// Poller polls every worker's Prometheus /metrics for its own view
// of its load: it sees requests other routers (or clients going around the
// router) sent.
type Poller struct {
	Router   *router.Router
	Client   *http.Client
	Interval time.Duration
	Log      *slog.Logger

	failing sync.Map // worker id → logged
}

// Engine metric names: vLLM, SGLang, and our simulated engine.
const (
	emVLLMRunning     = "vllm:num_requests_running"
	emVLLMWaiting     = "vllm:num_requests_waiting"
	emVLLMKVUsage     = "vllm:kv_cache_usage_perc"
	emVLLMKVUsageOld  = "vllm:gpu_cache_usage_perc"
	emVLLMCacheConfig = "vllm:cache_config_info"
	emSGLRunning      = "sglang:num_running_reqs"
	emSGLWaiting      = "sglang:num_queue_reqs"
	emSGLTokenUsage   = "sglang:token_usage"
	emSGLUsedTokens   = "sglang:num_used_tokens"
	emMockRunning     = "kvrouter_mocker_requests_running"
	emMockWaiting     = "kvrouter_mocker_requests_waiting"
	emMockUsed        = "kvrouter_mocker_gpu_kv_blocks_used"
	emMockTotal       = "kvrouter_mocker_gpu_kv_blocks_total"

	emLabelEngine    = "engine"  // vLLM: local DP rank
	emLabelDPRank    = "dp_rank" // SGLang, the simulated engine: global DP rank
	emLabelNumBlocks = "num_gpu_blocks"
)

// Run polls until ctx ends.
func (e *Poller) Run(ctx context.Context) {
	t := time.NewTicker(e.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var wg sync.WaitGroup
		for _, w := range e.Router.AllWorkers() {
			wg.Go(func() { e.poll(ctx, w) })
		}
		wg.Wait()
	}
}

func (e *Poller) poll(ctx context.Context, w router.Worker) {
	ctx, cancel := context.WithTimeout(ctx, e.Interval)
	defer cancel()
	loads, err := e.fetch(ctx, w)
	if err != nil {
		if ctx.Err() != nil && ctx.Err() != context.DeadlineExceeded {
			return // the router is stopping
		}
		// The last figures would stand for a load the engine may no
		// longer have: routing goes on the router's own view instead.
		e.Router.ClearEngineLoad(w.ID)
		if _, logged := e.failing.LoadOrStore(w.ID, true); !logged {
			e.Log.Warn("engine metrics: poll failed; routing on the router's own view of its load until it answers", "worker", w.ID, "err", err)
		}
		return
	}
	e.failing.Delete(w.ID)
	for rank, l := range loads {
		e.Router.SetEngineLoad(w.ID, rank, l)
	}
}

func (e *Poller) fetch(ctx context.Context, w router.Worker) (map[int]router.EngineLoad, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.URL+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := e.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	return parseEngineMetrics(b, w), nil
}

// parseEngineMetrics reads the load of each of w's ranks from a Prometheus
// text exposition; lines it cannot parse are left out. Blocks in use come
// from whichever figures the engine gives: vLLM's usage fraction times
// num_gpu_blocks, SGLang's used tokens over the block size, the simulated
// engine's used blocks. Series without a rank label describe the whole
// engine and are spread evenly over its ranks.
func parseEngineMetrics(text []byte, w router.Worker) map[int]router.EngineLoad {
	per := map[int]*engineAcc{}
	whole := &engineAcc{}
	e := promtext.ParseLenient(text)
	// Names in order, so that where an engine gives both of two names for
	// one figure the same one wins every time (the current vLLM name,
	// kv_cache_usage_perc, after the older gpu_cache_usage_perc).
	for _, name := range slices.Sorted(maps.Keys(e)) {
		for _, sm := range e.Samples(name) {
			labels, value := sm.Labels, sm.Value
			a := whole
			if v, ok := labels[emLabelDPRank]; ok {
				if r, err := strconv.Atoi(v); err == nil {
					a = rankAcc(per, r)
				}
			} else if v, ok := labels[emLabelEngine]; ok {
				if r, err := strconv.Atoi(v); err == nil {
					a = rankAcc(per, w.DPStart+r)
				}
			}
			switch name {
			case emVLLMRunning, emSGLRunning, emMockRunning:
				a.running += value
			case emVLLMWaiting, emSGLWaiting, emMockWaiting:
				a.waiting += value
			case emVLLMKVUsage, emVLLMKVUsageOld, emSGLTokenUsage:
				a.usage = value
			case emSGLUsedTokens:
				a.usedBlocks += value / float64(w.BlockSize)
			case emMockUsed:
				a.usedBlocks += value
			case emMockTotal:
				a.totalBlocks += value
			case emVLLMCacheConfig:
				if n, err := strconv.ParseFloat(labels[emLabelNumBlocks], 64); err == nil {
					a.totalBlocks = n
				}
			}
		}
	}
	load := func(a *engineAcc, share float64) router.EngineLoad {
		l := router.EngineLoad{Running: a.running * share, Waiting: a.waiting * share, KVUsage: a.usage,
			KVUsedBlocks: a.usedBlocks * share}
		if l.KVUsedBlocks == 0 {
			l.KVUsedBlocks = a.usage * a.totalBlocks * share
		} else if a.totalBlocks > 0 {
			l.KVUsage = a.usedBlocks / a.totalBlocks
		}
		return l
	}
	out := map[int]router.EngineLoad{}
	if len(per) == 0 {
		for r := w.DPStart; r < w.DPStart+w.DPSize; r++ {
			out[r] = load(whole, 1/float64(w.DPSize))
		}
		return out
	}
	for r, a := range per {
		if !w.HasRank(r) {
			continue
		}
		if a.totalBlocks == 0 {
			// vLLM states its block count once for all ranks.
			a.totalBlocks = whole.totalBlocks / float64(w.DPSize)
		}
		out[r] = load(a, 1)
	}
	return out
}

// engineAcc sums one rank's (or the whole engine's) samples.
type engineAcc struct {
	running, waiting, usage, usedBlocks, totalBlocks float64
}

func rankAcc(m map[int]*engineAcc, r int) *engineAcc {
	a := m[r]
	if a == nil {
		a = &engineAcc{}
		m[r] = a
	}
	return a
}
