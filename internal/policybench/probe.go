// This file holds the probe pulls the calibration measures.

package policybench

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"kvrouter/internal/cluster"
)

// The calibration router lets the probes force their worker and hints any
// longer peer prefix, so that every probe pull happens whatever its cost.
var probeRouterFlags = []string{"--routing", "kv", "--allow-target-override",
	"--hint-policy", "min-blocks", "--hint-min-blocks", "1"}

// probeWait bounds each wait for the router to index a probe's blocks: a
// safety net, not a timing assertion.
const probeWait = 20 * time.Second

// probeSizes are the pull sizes measured, in blocks: from a couple of
// blocks (mostly fixed cost) to a long prefix (mostly transfer), within
// what one GPU pool holds beside the one output block.
func probeSizes(gpuBlocks int) []int {
	var out []int
	for _, n := range []int{2, 12, 48} {
		if n+2 <= gpuBlocks {
			out = append(out, n)
		}
	}
	return out
}

// completion is the part of a non-streaming completion the probes check.
type completion struct {
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		KVRouter     struct {
			PeerRestoredTokens int `json:"peer_restored_tokens"`
		} `json:"kvrouter"`
	} `json:"usage"`
}

// routeView is the part of POST /debug/route the probes read.
type routeView struct {
	Target struct {
		WorkerID string `json:"worker_id"`
	} `json:"target"`
	Hint json.RawMessage `json:"hint"`
}

// hintedBlocks counts the block hashes of a kv.fetch hint, in either
// placement form (the envelope or the older flat object).
func hintedBlocks(raw json.RawMessage) int {
	type payload struct {
		Blocks []uint64 `json:"block_hashes"`
	}
	var env struct {
		Actions []struct {
			ActionType string  `json:"action_type"`
			Payload    payload `json:"payload"`
		} `json:"actions"`
		payload
	}
	if len(raw) == 0 || json.Unmarshal(raw, &env) != nil {
		return 0
	}
	for _, a := range env.Actions {
		if a.ActionType == "kv.fetch" {
			return len(a.Payload.Blocks)
		}
	}
	return len(env.Blocks)
}

// prober measures pulls from engine a to engine b through the calibration
// router.
type prober struct {
	router    cluster.Router
	a, b      cluster.Engine
	blockSize int
	rng       *rand.Rand
}

// measure pulls each size repeats times, after one warm-up pull that opens
// the runners' connections, interleaving sizes so that a drift in the
// machine's load affects them alike.
func (p *prober) measure(ctx context.Context, sizes []int, repeats int) ([]Probe, error) {
	if _, err := p.one(ctx, sizes[0]); err != nil {
		return nil, fmt.Errorf("warm-up pull: %w", err)
	}
	var out []Probe
	for range repeats {
		for _, n := range sizes {
			pr, err := p.one(ctx, n)
			if err != nil {
				return nil, err
			}
			out = append(out, pr)
		}
	}
	return out, nil
}

// one computes a fresh prompt of n full blocks (and one more token, which
// is always computed) on a, waits until the router would hint all n
// blocks to b, sends it to b and reads the pull's wall time from b's
// metrics.
func (p *prober) one(ctx context.Context, n int) (Probe, error) {
	prompt := make([]uint32, n*p.blockSize+1)
	for i := range prompt {
		prompt[i] = demoVocab.Lo + uint32(p.rng.IntN(int(demoVocab.Hi-demoVocab.Lo)))
	}
	body := map[string]any{"model": cluster.Model, "prompt": prompt, "max_tokens": 1, "temperature": 0}
	start := time.Now()
	var onA completion
	if err := p.send(ctx, p.a.ID, body, &onA); err != nil {
		return Probe{}, err
	}
	pr := Probe{Blocks: n, PrefillMS: ms(time.Since(start))}
	err := poll(ctx, probeWait, fmt.Sprintf("router hint of %d blocks from %s to %s", n, p.a.ID, p.b.ID), func() (bool, string, error) {
		var v routeView
		if _, err := cluster.PostJSON(ctx, p.router.Admin+pathRoute, p.b.ID, body, &v); err != nil {
			return false, "", err
		}
		got := hintedBlocks(v.Hint)
		return got >= n, fmt.Sprintf("%d blocks hinted", got), nil
	})
	if err != nil {
		return Probe{}, err
	}
	before, err := scrape(ctx, p.b.URL)
	if err != nil {
		return Probe{}, err
	}
	var onB completion
	if err := p.send(ctx, p.b.ID, body, &onB); err != nil {
		return Probe{}, err
	}
	after, err := scrape(ctx, p.b.URL)
	if err != nil {
		return Probe{}, err
	}
	if got, want := onB.Usage.KVRouter.PeerRestoredTokens, n*p.blockSize; got != want {
		return Probe{}, fmt.Errorf("%w: engine %s restored %d tokens from %s, want %d (see its log)",
			ErrCalibration, p.b.ID, got, p.a.ID, want)
	}
	b0, b1 := readPulls(before), readPulls(after)
	if b1.count-b0.count != 1 {
		return Probe{}, fmt.Errorf("%w: engine %s counted %v pulls for one hinted request", ErrCalibration, p.b.ID, b1.count-b0.count)
	}
	pr.PullMS = (b1.seconds - b0.seconds) * 1e3
	return pr, nil
}

func (p *prober) send(ctx context.Context, target string, body any, out *completion) error {
	h, err := cluster.PostJSON(ctx, p.router.URL+pathComplete, target, body, out)
	if err != nil {
		return fmt.Errorf("probe request to %s: %w", target, err)
	}
	if got := h.Get(headerWorker); got != target {
		return fmt.Errorf("%w: probe forced to %s went to %q", ErrCalibration, target, got)
	}
	return nil
}

// calibrate returns the cost model of the kv_hints router: pulls measured
// between the first two engines unless the options give their rates.
func calibrate(ctx context.Context, o *Options, router cluster.Router, engines []cluster.Engine) (Calibration, error) {
	if o.HintBandwidthGbps > 0 {
		setup := o.HintSetup
		if setup == 0 {
			setup = o.pullSetupWall()
		}
		return newCalibration(o, setup, o.HintBandwidthGbps), nil
	}
	p := &prober{router: router, a: engines[0], b: engines[1], blockSize: o.BlockSize,
		rng: rand.New(rand.NewPCG(2026, 7))}
	sizes := probeSizes(o.GPUBlocks)
	if len(sizes) < 2 {
		return Calibration{}, fmt.Errorf("%w: --gpu-blocks %d leaves no room for probe pulls; set --hint-bandwidth-gbps", ErrOptions, o.GPUBlocks)
	}
	probes, err := p.measure(ctx, sizes, o.ProbeRepeats)
	if err != nil {
		return Calibration{}, fmt.Errorf("measuring peer pulls (or set --hint-bandwidth-gbps): %w", err)
	}
	setup, gbps, err := FitPulls(probes, o.BlockSize*o.KVBytesPerToken)
	if err != nil {
		return Calibration{}, err
	}
	if o.HintSetup > 0 {
		setup = o.HintSetup
	}
	c := newCalibration(o, setup, gbps)
	c.Measured, c.Probes = true, probes
	c.MeasuredPrefillTokensPerS = FitPrefill(probes, o.BlockSize)
	return c, nil
}
