// This file holds the pd scenario: disaggregated serving of both flavours, answers checked against one aggregated engine.

package demo

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"kvrouter/internal/cluster"
	"kvrouter/internal/mocker"
	"kvrouter/internal/promtext"
)

// The pd scenario's fleet and traffic: per flavour one prefill and two
// decode engines behind the router, and multi-turn sessions whose later
// turns add a short message to a long context: a new context is longer
// than serve's --pd-local-prefill-tokens (its prefill leg runs), a
// follow-up's rest shorter, so that a vLLM decode worker holding the
// conversation runs it alone.
const (
	pdBlockSize       = 16
	pdKVBytesPerToken = 256
	pdGPUBlocks       = 4096
	pdRunnerBlocks    = 8192
	pdSessions        = 12
	pdTurns           = 4
	pdConcurrency     = 4
	pdSystemTokens    = 3000 // each session's opening context
	pdTurnTokens      = 40   // what each later turn adds
	pdMaxTokens       = 12
)

// Metric names the scenario reads from the router.
const (
	metricPDLegs    = "kvrouter_pd_legs_total"
	metricPDSkipped = "kvrouter_pd_prefill_skipped_total"
	metricPDFall    = "kvrouter_pd_fallbacks_total"
	labelLeg        = "leg"
)

// PDOptions configure the pd scenario.
type PDOptions struct {
	Binary  string // kvrouter executable; empty re-executes this one
	LogDir  string
	Speedup float64
	Logger  *slog.Logger
	Err     io.Writer // progress lines
}

// PDResult is the scenario's verdict, printed as JSON.
type PDResult struct {
	Flavours map[string]PDFlavour `json:"flavours"`
}

// PDFlavour is one flavour's run.
type PDFlavour struct {
	Requests           int `json:"requests"`
	Errors             int `json:"errors"`
	PrefillLegs        int `json:"prefill_legs"`
	SkippedPrefillLegs int `json:"skipped_prefill_legs"`
	Fallbacks          int `json:"fallbacks"`
	// OutputsIdenticalToAggregated: every answer is the one an aggregated
	// engine of the same model gives the same prompt.
	OutputsIdenticalToAggregated bool `json:"outputs_identical_to_aggregated"`
	// DecodePulledTokens is the prompt tokens decode workers pulled from
	// the prefill worker's runner (usage.kvrouter.peer_restored_tokens).
	DecodePulledTokens int      `json:"decode_pulled_tokens"`
	TTFTP50MS          float64  `json:"ttft_p50_ms"`
	Workers            []string `json:"workers"`
	LogDir             string   `json:"log_dir"`
}

// OK is the scenario's pass condition: no errors, every answer an
// aggregated engine's, and the prefill legs ran.
func (r PDResult) OK() bool {
	for _, f := range r.Flavours {
		if f.Errors != 0 || !f.OutputsIdenticalToAggregated || f.PrefillLegs == 0 || f.Requests == 0 {
			return false
		}
	}
	return len(r.Flavours) == 2
}

// PD runs the scenario for vLLM, then SGLang.
func PD(ctx context.Context, o PDOptions) (PDResult, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Err == nil {
		o.Err = io.Discard
	}
	if o.Speedup == 0 {
		o.Speedup = 1
	}
	res := PDResult{Flavours: map[string]PDFlavour{}}
	for _, flavor := range []string{"vllm", "sglang"} {
		f, err := pdFlavour(ctx, &o, flavor)
		if err != nil {
			return res, fmt.Errorf("pd scenario, %s: %w", flavor, err)
		}
		res.Flavours[flavor] = f
	}
	return res, nil
}

func pdFlavour(ctx context.Context, o *PDOptions, flavor string) (PDFlavour, error) {
	ids := []string{"prefill", "decode-1", "decode-2"}
	fmt.Fprintf(o.Err, "%s: starting a prefill and two decode engines with their state agents and a router...\n", flavor)
	logDir := ""
	if o.LogDir != "" {
		logDir = o.LogDir + "/" + flavor
	}
	c, err := cluster.Start(ctx, cluster.Options{
		Binary: o.Binary, Engines: len(ids), WorkerIDs: ids, Roles: []string{mocker.RolePrefill, mocker.RoleDecode, mocker.RoleDecode},
		Flavor: flavor, BlockSize: pdBlockSize, KVBytesPerToken: pdKVBytesPerToken, GPUBlocks: pdGPUBlocks, RunnerBlocks: pdRunnerBlocks,
		PrefillPerToken: DefaultPrefillPerToken, DecodePerToken: DefaultDecodePerToken, Speedup: o.Speedup,
		LogDir: logDir, KeepLogs: true, Logger: o.Logger,
	})
	if err != nil {
		return PDFlavour{}, err
	}
	f, err := pdRun(ctx, o, c, flavor)
	f.Workers, f.LogDir = ids, c.LogDir()
	return f, errors.Join(err, c.Stop())
}

// pdRun sends the sessions through the router and checks every answer
// against an aggregated engine of the same configuration, run here, off
// the router.
func pdRun(ctx context.Context, o *PDOptions, c *cluster.Cluster, flavor string) (PDFlavour, error) {
	ref, err := mocker.Start(mocker.Config{Listen: "127.0.0.1:0", Flavor: mocker.Flavor(flavor), BlockSize: pdBlockSize,
		KVBytesPerToken: pdKVBytesPerToken, GPUBlocks: pdGPUBlocks, RunnerBlocks: pdRunnerBlocks, Speedup: 1000,
		// Nobody reads its events: they stay in the process.
		ControlPort: freePort(), EventsEndpoint: "inproc://kvrouter-demo-pd-reference-" + flavor, ReplayEndpoint: "none", Logger: o.Logger})
	if err != nil {
		return PDFlavour{}, fmt.Errorf("the aggregated reference engine: %w", err)
	}
	defer ref.Close()
	sessions := pdSessionsOf(flavor)
	fmt.Fprintf(o.Err, "%s: sending %d sessions x %d turns through %s\n", flavor, pdSessions, pdTurns, c.RouterURL())
	var (
		mu      sync.Mutex
		f       = PDFlavour{OutputsIdenticalToAggregated: true}
		ttfts   []float64
		work    = make(chan [][]uint32)
		wg      sync.WaitGroup
		firstEr error
	)
	for range pdConcurrency {
		wg.Go(func() {
			for turns := range work {
				for _, prompt := range turns {
					a := pdAsk(ctx, c.RouterURL(), prompt)
					want, rerr := pdReference(ctx, ref.URL(), prompt)
					mu.Lock()
					f.Requests++
					if a.err != nil || rerr != nil {
						f.Errors++
						if firstEr == nil {
							firstEr = errors.Join(a.err, rerr)
						}
					} else {
						ttfts = append(ttfts, a.ttftMS)
						f.DecodePulledTokens += a.pulled
						f.OutputsIdenticalToAggregated = f.OutputsIdenticalToAggregated && a.text == want
					}
					mu.Unlock()
				}
			}
		})
	}
	for _, s := range sessions {
		work <- s
	}
	close(work)
	wg.Wait()
	if firstEr != nil {
		o.Logger.Warn("pd scenario: a request failed", "flavor", flavor, "err", firstEr)
	}
	if f.Requests == f.Errors {
		f.OutputsIdenticalToAggregated = false
	}
	slices.Sort(ttfts)
	if len(ttfts) > 0 {
		f.TTFTP50MS = ttfts[len(ttfts)/2]
	}
	text, err := cluster.Get(ctx, c.RouterAdminURL()+pathMetrics)
	if err != nil {
		return f, fmt.Errorf("router metrics: %w", err)
	}
	m, err := promtext.Parse(text)
	if err != nil {
		return f, fmt.Errorf("router metrics: %w", err)
	}
	f.PrefillLegs = int(m.Sum(metricPDLegs, map[string]string{labelLeg: "prefill"}))
	f.SkippedPrefillLegs = int(m.Sum(metricPDSkipped, nil))
	f.Fallbacks = int(m.Sum(metricPDFall, nil))
	return f, nil
}

// pdSessionsOf is the scenario's sessions: each a long opening context and
// turns that add a short message to the last prompt.
func pdSessionsOf(flavor string) [][][]uint32 {
	r := rand.New(rand.NewPCG(uint64(len(flavor)), 7))
	word := func() uint32 { return seedVocabLo + uint32(r.IntN(seedVocabHi-seedVocabLo)) }
	out := make([][][]uint32, pdSessions)
	for s := range out {
		prompt := make([]uint32, pdSystemTokens)
		for i := range prompt {
			prompt[i] = word()
		}
		for range pdTurns {
			out[s] = append(out[s], slices.Clone(prompt))
			for range pdTurnTokens {
				prompt = append(prompt, word())
			}
		}
	}
	return out
}

// pdAnswer is one streamed answer through the router.
type pdAnswer struct {
	text   string
	ttftMS float64
	pulled int
	err    error
}

// pdAsk streams a completion through the router: its text, time to the
// first token, and whether it ended whole.
func pdAsk(ctx context.Context, router string, prompt []uint32) pdAnswer {
	body, _ := json.Marshal(map[string]any{"model": cluster.Model, "prompt": prompt, "max_tokens": pdMaxTokens, "stream": true,
		"stream_options": map[string]bool{"include_usage": true}})
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, router+pathComplete, bytes.NewReader(body))
	if err != nil {
		return pdAnswer{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return pdAnswer{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return pdAnswer{err: fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(b))}
	}
	var a pdAnswer
	done := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var chunk struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Usage *struct {
				KVRouter struct {
					Peer int `json:"peer_restored_tokens"`
				} `json:"kvrouter"`
			} `json:"usage"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			return pdAnswer{err: fmt.Errorf("event %q: %w", data, err)}
		}
		if chunk.Error != nil {
			return pdAnswer{err: fmt.Errorf("error event: %s", chunk.Error)}
		}
		for _, ch := range chunk.Choices {
			if a.text == "" && ch.Text != "" {
				a.ttftMS = ms(time.Since(start))
			}
			a.text += ch.Text
		}
		if chunk.Usage != nil {
			a.pulled = chunk.Usage.KVRouter.Peer
		}
	}
	if err := sc.Err(); err != nil {
		return pdAnswer{err: err}
	}
	if !done {
		return pdAnswer{err: errors.New("the stream ended without [DONE]")}
	}
	return a
}

// pdReference is the aggregated engine's answer to prompt.
func pdReference(ctx context.Context, url string, prompt []uint32) (string, error) {
	var c completion
	if _, err := cluster.PostJSON(ctx, url+pathComplete, "", map[string]any{"prompt": prompt, "max_tokens": pdMaxTokens}, &c); err != nil {
		return "", fmt.Errorf("reference engine: %w", err)
	}
	return c.text(), nil
}

// freePort is a loopback TCP port free right now (the reference engine's
// runner, which nobody dials).
func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
