// This file holds the router service's options and Start, which wires its packages together.

package serve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"kvrouter/internal/admin"
	"kvrouter/internal/bus"
	"kvrouter/internal/contextlen"
	"kvrouter/internal/cost"
	"kvrouter/internal/direct"
	"kvrouter/internal/discovery"
	"kvrouter/internal/enginehealth"
	"kvrouter/internal/enginemetrics"
	"kvrouter/internal/follow"
	"kvrouter/internal/frontdoor"
	"kvrouter/internal/hints"
	"kvrouter/internal/loadshare"
	"kvrouter/internal/router"
	"kvrouter/internal/runnerprobe"
	"kvrouter/internal/tokcheck"
	"kvrouter/internal/upstream"
)

// errOptions marks a configuration that cannot start; the message names the
// flag to fix.
var errOptions = errors.New("bad serve options")

// Hint policy names (--hint-policy).
const (
	policyCost      = "cost"
	policyMinBlocks = "min-blocks"
	policyOff       = "off"
)

// Options configures a router service; each field is a `kvrouter serve` flag.
type Options struct {
	Listen string
	// AdminListen is where the operator views (/metrics, /debug/*) are
	// served, apart from the OpenAI port: they tell whose prefixes are
	// cached and where the runners are. Empty serves none.
	AdminListen string
	// NATS is the URL of an external cluster; empty starts an embedded
	// server. Bus, when set, is used instead (tests share one).
	NATS string
	Bus  *bus.Bus
	// NATSAuth is the credential and TLS of the connection; with an
	// embedded server, what it requires of agents and replicas.
	NATSAuth bus.Auth
	// NATSListen is where the embedded server listens (HOST:PORT, port 0
	// picks one); agents on other machines need a reachable host.
	NATSListen string
	// Registry overrides the NATS key-value registry (tests use
	// discovery.Memory). Bucket and Lease configure the NATS one.
	Registry discovery.Registry
	Bucket   string
	Lease    time.Duration

	Workers    []direct.WorkerSpec
	EventsBind string
	// PeerAllow lists the networks (CIDRs or addresses) whose runner
	// endpoints any registration may name; otherwise only endpoints on the
	// registering worker's own host are hinted.
	PeerAllow []string

	// Tokenizer is frontdoor.TokenizerEngine (the default: the engines'
	// own POST /tokenize), frontdoor.TokenizerDemo (the simulated fleet's)
	// or a tokenizer.json or model directory.
	Tokenizer       string
	TokenizeCache   int
	ChatTemplate    string // a Jinja file or a built-in format; "" is the model's own
	TokenizerConfig string
	// TokenizerCheck is how often each model's tokenization is checked
	// against an engine's /tokenize; 0 never.
	TokenizerCheck time.Duration

	Weights     cost.Weights
	Temperature float64
	Routing     string // --routing: kv, round-robin, random, least-loaded

	HintPolicy    string
	HintMinBlocks int
	// HintMargin is the share of the recompute a pull must save to be
	// hinted (cost policy).
	HintMargin float64
	// The cost policy learns a pull's setup and rate per (source, target)
	// and each target's recompute rate from what engines report, starting
	// from hints.DefaultPrior. A figure set here is fixed instead: 0 learns
	// it (HintSetup < 0 fixes a zero setup). KVBytesPerToken also sets the
	// prior's KV size.
	HintBandwidthGbps     float64
	HintSetup             time.Duration
	HintPrefillTokensPerS float64
	KVBytesPerToken       int64

	ApproxTTL             time.Duration
	DetachedOwnerTTL      time.Duration
	EngineMetricsInterval time.Duration
	AllowTargetOverride   bool
	MaxBlocks             int
	// MaxIndexBytes caps each index's estimated memory; 0 is unbounded.
	// The command's --index-memory derives it from the machine.
	MaxIndexBytes int64
	// UpstreamIdleTimeout is how long a keep-alive connection to an engine
	// may sit idle and still be reused: below the engine's own keep-alive
	// (uvicorn's 5 s) or that of any proxy in front of it.
	UpstreamIdleTimeout time.Duration
	// HealthInterval is how often each worker's GET /health is probed; 0
	// probes only workers marked down (a refused connection marks one).
	// HealthTimeout bounds a probe; HealthDownAfter failed probes in a row
	// mark a worker down.
	HealthInterval, HealthTimeout time.Duration
	HealthDownAfter               int
	// RetryReset sends a request whose connection to a worker broke before
	// any byte of the answer to another worker, once.
	RetryReset bool
	// RunnerProbe and OwnerTTL probe the runners of --worker engines given
	// control=, as the agent's flags of the same names do (runnerprobe).
	RunnerProbe, OwnerTTL time.Duration
	// PD configures disaggregated serving (--pd-*).
	PD router.PDConfig
	// BodyTimeout bounds the time a client takes to send a request body;
	// MaxBodyMemory bounds the bytes of the bodies held at once.
	BodyTimeout   time.Duration
	MaxBodyMemory int64

	// Replica names this router on the load subject (default random).
	Replica string
	// PeerEvery and PeerTimeout pace load sharing between replicas.
	PeerEvery, PeerTimeout time.Duration
	// Tick paces expiry (approximate blocks, detached owners); block
	// counts are refreshed every SizeEvery.
	Tick, SizeEvery time.Duration

	Now func() time.Time
	Log *slog.Logger
	// ContextEvery is how often workers are asked for their context length
	// (contextlen.Poller.Every); 0 never asks, so that prompts are not
	// bounded by it. For benchmarks whose engines count every request;
	// not a flag.
	ContextEvery time.Duration
	// Trace, when set, gets the timing of every request sent to a worker
	// (frontdoor.Server.Trace); for benchmarks, not a flag.
	Trace func(frontdoor.Timing)
	// Local, when set, is the tokenizer, already loaded (Tokenizer and
	// the options that go with it are then ignored); for benchmarks, which
	// build their fleet's caches with it, not a flag.
	Local *frontdoor.Local
}

// DefaultAdminListen is where the operator views are served unless told
// otherwise: loopback, next to the OpenAI port's default.
const DefaultAdminListen = "127.0.0.1:8081"

// Defaults returns the flag defaults.
func Defaults() Options {
	return Options{
		Listen: ":8080", AdminListen: DefaultAdminListen, NATSListen: "127.0.0.1:0", Lease: 10 * time.Second, Bucket: discovery.DefaultBucket,
		Tokenizer: frontdoor.TokenizerEngine, TokenizeCache: 4096, TokenizerCheck: tokcheck.Default,
		Weights:    cost.DefaultWeights(),
		HintPolicy: policyCost, HintMinBlocks: 1, HintMargin: 0.1,
		ApproxTTL: 120 * time.Second, DetachedOwnerTTL: 60 * time.Second, UpstreamIdleTimeout: upstream.DefaultIdleTimeout,
		RunnerProbe: runnerprobe.DefaultInterval, OwnerTTL: runnerprobe.DefaultTTL,
		HealthInterval: 2 * time.Second, HealthTimeout: time.Second, HealthDownAfter: 2, RetryReset: true,
		BodyTimeout: frontdoor.DefaultBodyTimeout, MaxBodyMemory: frontdoor.DefaultMaxBodyMemory, PD: router.DefaultPD(),
		PeerEvery: 2 * time.Second, PeerTimeout: 10 * time.Second, Tick: time.Second, SizeEvery: 10 * time.Second,
		ContextEvery: contextlen.DefaultEvery,
	}
}

// runnerProbe is how --worker engines' runners are probed.
func (o *Options) runnerProbe() runnerprobe.Config {
	return runnerprobe.Config{Interval: o.RunnerProbe, TTL: o.OwnerTTL}
}

// hintPolicy returns the hint policy factory the options describe, and the
// learner behind the cost policy (nil for the others).
func (o *Options) hintPolicy() (func(blockSize int) (hints.Policy, error), *hints.Learner, error) {
	switch o.HintPolicy {
	case policyOff:
		return nil, nil, nil // router.Config.NoHints: no policy is ever asked
	case policyMinBlocks:
		if o.HintMinBlocks < 1 {
			return nil, nil, fmt.Errorf("%w: --hint-min-blocks %d must be at least 1", errOptions, o.HintMinBlocks)
		}
		p := hints.MinBlocks(o.HintMinBlocks)
		return func(int) (hints.Policy, error) { return p, nil }, nil, nil
	case policyCost:
		for name, v := range map[string]float64{"--hint-bandwidth-gbps": o.HintBandwidthGbps,
			"--hint-prefill-tokens-per-s": o.HintPrefillTokensPerS, "--kv-bytes-per-token": float64(o.KVBytesPerToken)} {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, nil, fmt.Errorf("%w: %s %v must be positive (or 0 to learn it)", errOptions, name, v)
			}
		}
		if !(o.HintMargin >= 0 && o.HintMargin < 1) {
			return nil, nil, fmt.Errorf("%w: --hint-margin %v must be in [0, 1)", errOptions, o.HintMargin)
		}
		cfg := hints.LearnConfig{}
		cfg.Prior.BytesPerToken = float64(o.KVBytesPerToken)
		l, err := hints.NewLearner(cfg)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %v", errOptions, err)
		}
		fixed := hints.Overrides{Setup: o.HintSetup, BandwidthBytesPerS: o.HintBandwidthGbps * 1e9 / 8,
			BytesPerToken: float64(o.KVBytesPerToken), PrefillTokensPerS: o.HintPrefillTokensPerS}
		return func(bs int) (hints.Policy, error) {
			return &hints.Learned{L: l, BlockSize: bs, Margin: o.HintMargin, Fixed: fixed}, nil
		}, l, nil
	}
	return nil, nil, fmt.Errorf("%w: --hint-policy %q: want %s, %s or %s", errOptions, o.HintPolicy, policyCost, policyMinBlocks, policyOff)
}

func (o *Options) check() error {
	w := o.Weights
	for name, v := range map[string]float64{"--overlap-credit": w.OverlapCredit, "--host-credit": w.HostCredit,
		"--disk-credit": w.DiskCredit, "--prefill-load-scale": w.PrefillLoadScale, "--request-weight": w.RequestWeight,
		"--temperature": o.Temperature} {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%w: %s %v must be a non-negative number", errOptions, name, v)
		}
	}
	if o.ApproxTTL <= 0 {
		return fmt.Errorf("%w: --approx-ttl %v must be positive", errOptions, o.ApproxTTL)
	}
	if o.UpstreamIdleTimeout <= 0 {
		return fmt.Errorf("%w: --upstream-idle-timeout %v must be positive (below the engines' keep-alive timeout)", errOptions, o.UpstreamIdleTimeout)
	}
	if o.DetachedOwnerTTL < 0 {
		return fmt.Errorf("%w: --detached-owner-ttl %v must not be negative", errOptions, o.DetachedOwnerTTL)
	}
	if err := o.runnerProbe().Check(); err != nil {
		return fmt.Errorf("%w: %w", errOptions, err)
	}
	if o.HealthInterval < 0 {
		return fmt.Errorf("%w: --health-interval %v must not be negative", errOptions, o.HealthInterval)
	}
	if o.HealthTimeout <= 0 {
		return fmt.Errorf("%w: --health-timeout %v must be positive", errOptions, o.HealthTimeout)
	}
	if o.HealthDownAfter < 1 {
		return fmt.Errorf("%w: --health-down-after %d must be at least 1", errOptions, o.HealthDownAfter)
	}
	if err := o.PD.Check(); err != nil {
		return fmt.Errorf("%w: %v", errOptions, err)
	}
	if o.BodyTimeout <= 0 {
		return fmt.Errorf("%w: --body-timeout %v must be positive", errOptions, o.BodyTimeout)
	}
	if o.MaxBodyMemory <= 0 {
		return fmt.Errorf("%w: --max-body-memory %d must be positive", errOptions, o.MaxBodyMemory)
	}
	if o.EngineMetricsInterval < 0 {
		return fmt.Errorf("%w: --engine-metrics-interval %v must not be negative", errOptions, o.EngineMetricsInterval)
	}
	ids := map[string]bool{}
	for _, s := range o.Workers {
		if ids[s.ID] {
			return fmt.Errorf("%w: --worker id %q given twice (set id= to tell them apart)", errOptions, s.ID)
		}
		ids[s.ID] = true
	}
	if err := direct.CheckSpecs(o.Workers, o.EventsBind); err != nil {
		return fmt.Errorf("%w: %w", errOptions, err)
	}
	return nil
}

// tokenizerDefault was the embedded demo tokenizer's name, before a router
// in front of real engines stopped defaulting to it.
const tokenizerDefault = "default"

// newTokenizer builds the tokenizer --tokenizer names; local is nil when
// it asks the engines.
func (o *Options) newTokenizer(client *http.Client, r *router.Router) (tok frontdoor.Tokenizer, local *frontdoor.Local, err error) {
	if o.Local != nil {
		return o.Local, o.Local, nil
	}
	switch o.Tokenizer {
	case frontdoor.TokenizerEngine, "":
		if o.TokenizeCache < 0 {
			return nil, nil, fmt.Errorf("%w: --tokenize-cache %d must not be negative", errOptions, o.TokenizeCache)
		}
		if o.ChatTemplate != "" || o.TokenizerConfig != "" {
			return nil, nil, fmt.Errorf("%w: --chat-template and --tokenizer-config apply to a local tokenizer (--tokenizer PATH); with --tokenizer %s the engines render chats with their own template",
				errOptions, frontdoor.TokenizerEngine)
		}
		return frontdoor.NewEngine(client, func(model string) []frontdoor.EngineTarget {
			// An adapter's workers are its base model's; vLLM's /tokenize
			// takes the adapter's name as the model.
			base, _, _ := r.Resolve(model, "")
			var ts []frontdoor.EngineTarget
			for _, w := range r.WorkersOf(base) {
				ts = append(ts, frontdoor.EngineTarget{URL: w.URL, Chats: w.Engine != router.EngineSGLang})
			}
			return ts
		}, o.TokenizeCache), nil, nil
	case tokenizerDefault:
		return nil, nil, fmt.Errorf("%w: --tokenizer %s: the embedded demo tokenizer is no longer the default; give --tokenizer %s for the simulated fleet, %s for the engines' own /tokenize, or the model's tokenizer.json or directory",
			errOptions, tokenizerDefault, frontdoor.TokenizerDemo, frontdoor.TokenizerEngine)
	}
	local, err = frontdoor.LoadLocal(o.Tokenizer, o.TokenizerConfig, o.ChatTemplate)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errOptions, err)
	}
	return local, local, nil
}

// tokenizerName says what the router tokenizes with, for operators.
func (o *Options) tokenizerName() string {
	if o.Tokenizer == "" {
		return frontdoor.TokenizerEngine
	}
	return o.Tokenizer
}

// newClient is the HTTP client for what the router asks workers itself
// (their model, tokenization, metrics; requests go through upstream): no
// overall timeout (callers bound theirs), a bounded dial, and no
// compression.
func newClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		// A prompt of a few thousand tokens is tens of kilobytes: with the
		// default 4 KiB buffer it left in several writes, each body past
		// the first buffer through a fresh 32 KiB copy buffer.
		WriteBufferSize: 64 << 10,
	}}
}

// Peers is the front door's view of the load in flight.
var _ frontdoor.LoadTracker = (*loadshare.Peers)(nil)

// The poller tells the front door each model's context.
var _ frontdoor.ContextLimits = (*contextlen.Poller)(nil)

// Service is a running router service.
type Service struct {
	Addr string // the bound listen address
	// AdminAddr is the bound address of the operator views, "" when none
	// are served.
	AdminAddr string
	Server    *frontdoor.Server
	Router    *router.Router
	Bus       *bus.Bus

	cancel    context.CancelFunc
	http      *http.Server
	adminHTTP *http.Server // nil without --admin-listen
	quiet     quietConns   // connections of http and adminHTTP
	wg        sync.WaitGroup
	ownBus    bool
}

// Start brings a router service up: the routing decision core, NATS
// (embedded unless --nats), discovery and relay followers, the --worker
// fleet, health probes, engine metrics, load sharing, and the HTTP
// listener.
func Start(ctx context.Context, o Options) (*Service, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Replica == "" {
		o.Replica = replicaName()
	}
	if err := o.check(); err != nil {
		return nil, err
	}
	policy, learner, err := o.hintPolicy()
	if err != nil {
		return nil, err
	}
	routing := cost.RoutingKV
	if o.Routing != "" {
		if routing, err = cost.ParseRouting(o.Routing); err != nil {
			return nil, fmt.Errorf("%w: --routing: %v", errOptions, err)
		}
	}
	r, err := router.New(router.Config{Weights: o.Weights, Temperature: o.Temperature, Policy: policy,
		Routing: routing, NoHints: o.HintPolicy == policyOff,
		ApproxTTL: o.ApproxTTL, DetachedOwnerTTL: o.DetachedOwnerTTL, MaxBlocks: o.MaxBlocks,
		MaxIndexBytes: o.MaxIndexBytes,
		Health:        router.HealthConfig{Interval: o.HealthInterval, DownAfter: o.HealthDownAfter}})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errOptions, err)
	}
	client := newClient()
	tok, local, err := o.newTokenizer(client, r)
	if err != nil {
		return nil, err
	}
	if o.TokenizerCheck < 0 {
		return nil, fmt.Errorf("%w: --tokenizer-check-interval %v must not be negative", errOptions, o.TokenizerCheck)
	}
	reg := prometheus.NewRegistry()
	admin.Register(reg, r.Stats)
	var check *tokcheck.Checker
	if o.TokenizerCheck > 0 {
		check = &tokcheck.Checker{Local: local, Client: client, Models: r.Models, Workers: r.WorkersOf, Every: o.TokenizerCheck,
			Now: o.Now, Log: o.Log, Mismatch: tokcheck.NewGauge(reg)}
	}
	svc := &Service{Router: r, Bus: o.Bus}
	if svc.Bus == nil {
		bo := bus.Options{URL: o.NATS, Name: "kvrouter-serve", Logger: o.Log, Auth: o.NATSAuth}
		if o.NATS == "" {
			host, port, err := net.SplitHostPort(o.NATSListen)
			if err != nil {
				return nil, fmt.Errorf("%w: --nats-listen %q: want HOST:PORT: %v", errOptions, o.NATSListen, err)
			}
			if bo.Port, err = strconv.Atoi(port); err != nil || bo.Port < 0 || bo.Port > 65535 {
				return nil, fmt.Errorf("%w: --nats-listen %q: bad port", errOptions, o.NATSListen)
			}
			bo.Host = host
		}
		if svc.Bus, err = bus.Open(ctx, bo); err != nil {
			return nil, fmt.Errorf("--nats %q: %w", o.NATS, err)
		}
		svc.ownBus = true
		if svc.Bus.Embedded() {
			o.Log.Info("started embedded NATS; point agents and other replicas at it with --nats", "url", svc.Bus.URL,
				"token_file", svc.Bus.TokenFile)
		}
	}
	fail := func(err error) (*Service, error) {
		if svc.ownBus {
			svc.Bus.Close()
		}
		return nil, err
	}
	peerAllow, err := follow.ParsePeerAllow(o.PeerAllow)
	if err != nil {
		return fail(fmt.Errorf("%w: %v", errOptions, err))
	}
	registry := o.Registry
	if registry == nil {
		if registry, err = discovery.OpenNATS(ctx, svc.Bus.JS, o.Bucket, o.Lease, o.Log); err != nil {
			return fail(fmt.Errorf("discovery (--lease must match the agents'): %w", err))
		}
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fail(fmt.Errorf("--listen %s: %w", o.Listen, err))
	}
	svc.Addr = ln.Addr().String()
	var adminLn net.Listener
	if o.AdminListen != "" {
		if adminLn, err = net.Listen("tcp", o.AdminListen); err != nil {
			ln.Close()
			return fail(fmt.Errorf("--admin-listen %s: %w", o.AdminListen, err))
		}
		svc.AdminAddr = adminLn.Addr().String()
	}

	peers := loadshare.NewPeers(svc.Bus.Conn, o.Replica, r.Load(), o.PeerEvery, o.PeerTimeout, loadshare.NewMetrics(reg), o.Log, o.Now)
	up := &upstream.Client{IdleTimeout: o.UpstreamIdleTimeout}
	svc.Server = &frontdoor.Server{Router: r, Tok: tok, Upstream: up, Metrics: frontdoor.NewMetrics(reg, up), Log: o.Log, Now: o.Now, Load: peers,
		AllowTargetOverride: o.AllowTargetOverride, Replica: o.Replica, Trace: o.Trace, RetryReset: o.RetryReset,
		BodyTimeout: o.BodyTimeout, MaxBodyMemory: o.MaxBodyMemory, PD: o.PD, Learn: learner}
	if learner != nil {
		admin.RegisterLearner(reg, learner)
	}
	var contexts *contextlen.Poller
	if o.ContextEvery > 0 {
		contexts = &contextlen.Poller{Router: r, Client: client, Every: o.ContextEvery, Log: o.Log}
		svc.Server.Context = contexts
	}
	mux := http.NewServeMux()
	svc.Server.Mount(mux)
	svc.http = newHTTPServer(mux, &svc.quiet)
	if adminLn != nil {
		amux := http.NewServeMux()
		(&admin.Views{Router: r, Front: svc.Server, Gatherer: reg, Learn: learner, Tokenizer: o.tokenizerName(), Check: check}).Mount(amux)
		svc.adminHTTP = newHTTPServer(amux, &svc.quiet)
	}

	ctx, svc.cancel = context.WithCancel(context.WithoutCancel(ctx))
	run := func(f func()) { svc.wg.Go(f) }
	run(func() {
		if err := svc.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			o.Log.Error("http server stopped", "err", err)
		}
	})
	if svc.adminHTTP != nil {
		run(func() {
			if err := svc.adminHTTP.Serve(adminLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				o.Log.Error("operator views server stopped", "err", err)
			}
		})
	}
	// Agents' registrations are unknown until the first watch is in step.
	r.SetDiscoveryLive(false)
	disc := &follow.Discovery{Registry: registry, Router: r, NC: svc.Bus.Conn, Metrics: follow.NewMetrics(reg), Log: o.Log, Now: o.Now,
		PeerAllow: peerAllow}
	run(func() { disc.Run(ctx) })
	fleet := &direct.Fleet{Specs: o.Workers, EventsBind: o.EventsBind, Router: r, Client: client, Metrics: direct.NewMetrics(reg), Log: o.Log, Now: o.Now,
		RunnerProbe: o.runnerProbe()}
	run(func() { fleet.Run(ctx) })
	run(func() {
		if err := peers.Run(ctx); err != nil {
			o.Log.Error("load sharing with replicas stopped", "err", err)
		}
	})
	if contexts != nil {
		run(func() { contexts.Run(ctx) })
	}
	prober := &enginehealth.Prober{Router: r, Client: client, Timeout: o.HealthTimeout, Log: o.Log, Now: o.Now}
	run(func() { prober.Run(ctx) })
	if o.EngineMetricsInterval > 0 {
		em := &enginemetrics.Poller{Router: r, Client: client, Interval: o.EngineMetricsInterval, Log: o.Log}
		run(func() { em.Run(ctx) })
	}
	run(func() { housekeep(ctx, r, learner, o) })
	if check != nil {
		run(func() { check.Run(ctx) })
	}
	o.Log.Info("kvrouter serving", "listen", svc.Addr, "admin_listen", svc.AdminAddr, "replica", o.Replica, "workers_by_flag", len(o.Workers))
	return svc, nil
}

// housekeep expires what has a TTL, lets the hint learner's samples fade
// and recounts block sizes.
func housekeep(ctx context.Context, r *router.Router, l *hints.Learner, o Options) {
	tick := time.NewTicker(o.Tick)
	defer tick.Stop()
	sizes := time.NewTicker(o.SizeEvery)
	defer sizes.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			r.Expire(o.Now())
			if l != nil {
				l.Age(o.Now())
			}
		case <-sizes.C:
			r.RefreshSizes()
		}
	}
}

// Close stops serving and every service, waiting for them.
func (svc *Service) Close() error {
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := shutdown(sctx, svc.http)
	if svc.adminHTTP != nil {
		shutdown(sctx, svc.adminHTTP)
	}
	svc.cancel()
	svc.wg.Wait()
	if svc.Server != nil {
		svc.Server.Upstream.CloseIdle()
	}
	if svc.ownBus {
		svc.Bus.Close()
	}
	return err
}

// Run serves until ctx ends.
func Run(ctx context.Context, o Options) error {
	svc, err := Start(ctx, o)
	if err != nil {
		return err
	}
	<-ctx.Done()
	return svc.Close()
}

// replicaName picks a random name for a replica not given --replica.
func replicaName() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
