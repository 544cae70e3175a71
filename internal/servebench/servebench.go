// Package servebench measures the router service's own cost, `kvrouter
// bench router`: routed requests per second to a null engine fleet, the
// latency routing adds, and the CPU and memory that costs, with a fleet of
// worker ranks registered through discovery and their caches relayed over
// the event plane as state agents do.
//
// Everything runs in one process: the router service (serve.Start, with its
// embedded NATS), the agents, a null engine that answers every completion
// at once, and a closed-loop HTTP client. They share the machine's cores, so
// a second phase drives the same client straight at the null engine to
// tell what the client and engine cost by themselves.
package servebench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"runtime/pprof"
	"time"

	"kvrouter/internal/discovery"
	"kvrouter/internal/frontdoor"
	"kvrouter/internal/serve"
)

// ErrConfig marks a configuration that cannot run; the message names the
// flag to fix.
var ErrConfig = errors.New("bad bench router options")

// Config is one run's shape; each field is a `kvrouter bench router` flag.
type Config struct {
	Workers      int // worker ranks
	DP           int // ranks per registered worker
	Duration     time.Duration
	Warmup       time.Duration
	Concurrency  int
	PromptTokens int
	// Text sends prompts as text for the router to tokenize; otherwise as
	// token ids, as a front end that tokenizes itself does.
	Text bool
	// Tokenizer is the router's tokenizer for text prompts, as `kvrouter
	// serve --tokenizer` takes it (a tokenizer.json or model directory);
	// "" is the simulated fleet's demo tokenizer. It implies Text.
	Tokenizer string
	// NoPrefixCache has the router tokenize every prompt whole: the
	// workload's 2,048 request bodies come round again and again, which
	// real traffic does not do as much.
	NoPrefixCache bool
	Seed          uint64
	// Setup bounds how long the router may take to take the fleet in.
	Setup time.Duration
	// Profile, when set, gets a CPU profile of the routed phase alone.
	Profile io.Writer
	// MemProfile, when set, gets the allocations of the routed phase
	// (pprof "allocs", sampled every 64 KiB): what the collector has to
	// clean up per request.
	MemProfile io.Writer
}

// DefaultConfig is the flag defaults.
func DefaultConfig() Config {
	return Config{Workers: 1000, DP: 2, Duration: 10 * time.Second, Warmup: 2 * time.Second, Concurrency: 16,
		PromptTokens: 1536, Seed: 1, Setup: 2 * time.Minute}
}

// Result is what one run measured. The JSON keys are the report's wire
// names.
type Result struct {
	Workers        int     `json:"workers"`
	RoutedRPS      float64 `json:"routed_rps"`
	AddedP50us     float64 `json:"added_p50_us"`
	AddedP99us     float64 `json:"added_p99_us"`
	TokenizeP50us  float64 `json:"tokenize_p50_us"`
	CPUsPer1k      float64 `json:"cpu_s_per_1k"`
	RSSMB          float64 `json:"rss_mb"`
	DecideP50us    float64 `json:"decide_p50_us"`
	DecideP99us    float64 `json:"decide_p99_us"`
	ClientP50us    float64 `json:"client_p50_us"`
	ClientP99us    float64 `json:"client_p99_us"`
	ClientCPUsPer1 float64 `json:"client_engine_cpu_s_per_1k"`
	RouterCPUsPer1 float64 `json:"router_cpu_s_per_1k"`
	Requests       int64   `json:"requests"`
	Errors         int64   `json:"errors"`
	BackendHits    int64   `json:"backend_requests"`
	Traced         int     `json:"traced"`
	Sources        int     `json:"sources"`
	Concurrency    int     `json:"concurrency"`
	PromptTokens   int     `json:"prompt_tokens"`
	// MeanTokens is the requests' mean length in tokens of the router's
	// tokenizer (text prompts).
	MeanTokens float64 `json:"mean_prompt_tokens"`
	Input      string  `json:"input"`
	Tokenizer  string  `json:"tokenizer,omitempty"`
	// PrefixCache says the router's tokenizer reused the ids of prompt
	// prefixes it had seen.
	PrefixCache bool `json:"prefix_cache"`
	Cores       int  `json:"cores"`
}

func (c *Config) check() error {
	switch {
	case c.Workers < 1:
		return fmt.Errorf("%w: --workers %d must be at least 1", ErrConfig, c.Workers)
	case c.DP < 1:
		return fmt.Errorf("%w: --dp %d must be at least 1", ErrConfig, c.DP)
	case c.Concurrency < 1:
		return fmt.Errorf("%w: --concurrency %d must be at least 1", ErrConfig, c.Concurrency)
	case c.Duration <= 0:
		return fmt.Errorf("%w: --duration %v must be positive", ErrConfig, c.Duration)
	case c.Warmup < 0:
		return fmt.Errorf("%w: --warmup %v must not be negative", ErrConfig, c.Warmup)
	}
	return nil
}

var discard = slog.New(slog.DiscardHandler)

// Run brings up the router, the fleet and the null engine on loopback,
// drives the router for cfg.Duration after a warm-up, then the null engine
// alone for the same time, and tears everything down.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.MemProfile != nil {
		runtime.MemProfileRate = 0 // setup is not the router's cost
	}
	var local *frontdoor.Local
	if cfg.Tokenizer != "" || cfg.Text {
		cfg.Text = true
		name := cfg.Tokenizer
		if name == "" {
			name = frontdoor.TokenizerDemo
		}
		var err error
		if local, err = frontdoor.LoadLocal(name, "", ""); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrConfig, err)
		}
		if cfg.NoPrefixCache {
			m := *local.Model
			m.Tok = m.Tok.WithoutPrefixCache()
			local = &frontdoor.Local{Model: &m}
		}
	}
	w, err := newWorkload(cfg.Seed, cfg.PromptTokens, local)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	be, err := startNullEngine()
	if err != nil {
		return nil, err
	}
	defer be.close()

	var tr traces
	reg := discovery.NewMemory(time.Hour, time.Now)
	o := serve.Defaults()
	o.Listen, o.NATSListen, o.Registry, o.Log, o.Trace = "127.0.0.1:0", "127.0.0.1:0", reg, discard, tr.add
	// The null engine has no /tokenize: the router tokenizes itself, with
	// the tokenizer the agents' caches were built with.
	o.Local, o.TokenizerCheck = local, 0
	if local == nil {
		o.Tokenizer = frontdoor.TokenizerDemo // never used: prompts are ids
	}
	o.AdminListen = "" // the benchmark reads no operator view
	// The null engine counts every request it answers: nothing but the
	// benchmark's may reach it.
	o.ContextEvery = 0
	// The null engine answers a health probe like a request: periodic
	// probes would count as backend requests.
	o.HealthInterval = 0
	g, err := serve.Start(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("starting the router: %w", err)
	}
	defer g.Close()
	ag, err := startAgents(ctx, g.Bus.URL, reg, w, be.url, cfg.Workers, cfg.DP)
	if err != nil {
		return nil, err
	}
	defer ag.close()
	if err := waitInStep(ctx, g, 2*cfg.Workers, cfg.Setup); err != nil {
		return nil, err
	}

	// Both sets are built before anything is measured or profiled: the
	// router's allocation profile is not to hold the load generator's.
	toRouter, toEngine := make([][]byte, bodies), make([][]byte, bodies)
	tokens := 0
	for i := range bodies {
		q, err := w.request(i, cfg.Workers)
		if err != nil {
			return nil, err
		}
		tokens += q.tokens
		toRouter[i] = wireRequest(g.Addr, pathCompletions, q.body)
		toEngine[i] = wireRequest(be.ln.Addr().String(), pathCompletions, q.body)
	}
	if cfg.Warmup > 0 {
		if p := run(ctx, g.Addr, toRouter, cfg.Concurrency, cfg.Warmup); p.ok == 0 {
			return nil, fmt.Errorf("warm-up: no request went through: %v", p.firstErr)
		}
	}
	// Setup garbage is not the router's to collect.
	runtime.GC()
	hits0 := be.hits.Load()
	tr.set(true)
	if cfg.Profile != nil {
		if err := pprof.StartCPUProfile(cfg.Profile); err != nil {
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
	}
	if cfg.MemProfile != nil {
		runtime.MemProfileRate = 64 << 10 // sampled from here on only
	}
	routed := run(ctx, g.Addr, toRouter, cfg.Concurrency, cfg.Duration)
	if cfg.Profile != nil {
		pprof.StopCPUProfile()
	}
	if cfg.MemProfile != nil {
		// The profile is as of the last collection, and scaled by the
		// sampling rate in force when it is written.
		runtime.GC()
		err := pprof.Lookup("allocs").WriteTo(cfg.MemProfile, 0)
		runtime.MemProfileRate = 0
		if err != nil {
			return nil, fmt.Errorf("--memprofile: %w", err)
		}
	}
	ts := tr.set(false)
	hits := be.hits.Load() - hits0
	rss := rssMB()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if routed.ok == 0 {
		return nil, fmt.Errorf("no request went through the router: %v", routed.firstErr)
	}

	runtime.GC()
	direct := run(ctx, be.ln.Addr().String(), toEngine, cfg.Concurrency, cfg.Duration)
	if direct.ok == 0 {
		return nil, fmt.Errorf("no request reached the null engine directly: %v", direct.firstErr)
	}

	res := &Result{
		Workers: cfg.Workers, Requests: routed.ok, Errors: routed.failed, BackendHits: hits, Traced: len(ts),
		Sources: 2 * cfg.Workers, Concurrency: cfg.Concurrency, PromptTokens: cfg.PromptTokens,
		Input: "ids", Cores: runtime.GOMAXPROCS(0), RSSMB: rss,
		RoutedRPS:      float64(routed.ok) / routed.elapsed.Seconds(),
		CPUsPer1k:      routed.cpu.Seconds() / float64(routed.ok) * 1000,
		ClientCPUsPer1: direct.cpu.Seconds() / float64(direct.ok) * 1000,
		ClientP50us:    micros(quantile(routed.latency, 0.5)),
		ClientP99us:    micros(quantile(routed.latency, 0.99)),
	}
	if cfg.Text {
		res.Input, res.Tokenizer = "text", cfg.Tokenizer
		if res.Tokenizer == "" {
			res.Tokenizer = frontdoor.TokenizerDemo
		}
		res.MeanTokens = float64(tokens) / bodies
		res.PrefixCache = !cfg.NoPrefixCache
	}
	res.RouterCPUsPer1 = res.CPUsPer1k - res.ClientCPUsPer1
	added, tok, dec := make([]time.Duration, len(ts)), make([]time.Duration, len(ts)), make([]time.Duration, len(ts))
	for i, t := range ts {
		added[i], tok[i], dec[i] = t.Added, t.Tokenize, t.Decide
	}
	res.AddedP50us, res.AddedP99us = micros(quantile(added, 0.5)), micros(quantile(added, 0.99))
	res.TokenizeP50us = micros(quantile(tok, 0.5))
	res.DecideP50us, res.DecideP99us = micros(quantile(dec, 0.5)), micros(quantile(dec, 0.99))
	return res, nil
}

// WriteTable prints the result for people.
func (r *Result) WriteTable(w io.Writer) error {
	input := r.Input
	if r.Input == "text" {
		input = fmt.Sprintf("text (%.0f tokens on average, --tokenizer %s, prefix cache %v)", r.MeanTokens, r.Tokenizer, r.PrefixCache)
	}
	_, err := fmt.Fprintf(w, `router cost: %d worker ranks (%d sources), %d-token prompts as %s, %d client connections, %d cores
  routed requests/s          %10.0f   (%d requests, %d errors, %d reached the null engine)
  added latency p50 / p99    %10.1f / %.1f µs   (handler start to upstream request written, less tokenization)
  decision p50 / p99         %10.1f / %.1f µs
  tokenize p50               %10.1f µs
  client latency p50 / p99   %10.1f / %.1f µs   (round trip through the router and the null engine)
  CPU per 1,000 requests     %10.3f s   (whole process: router, client, null engine)
    client + null engine     %10.3f s   (the same client straight at the null engine)
    router (difference)      %10.3f s
  RSS                        %10.1f MB   (whole process)
The client and the null engine run in the router's process and share its cores.
`, r.Workers, r.Sources, r.PromptTokens, input, r.Concurrency, r.Cores,
		r.RoutedRPS, r.Requests, r.Errors, r.BackendHits,
		r.AddedP50us, r.AddedP99us, r.DecideP50us, r.DecideP99us, r.TokenizeP50us,
		r.ClientP50us, r.ClientP99us, r.CPUsPer1k, r.ClientCPUsPer1, r.RouterCPUsPer1, r.RSSMB)
	return err
}
