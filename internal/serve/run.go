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
	"kvrouter/internal/tokenizer"
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
	// NATS is the URL of an external cluster; empty starts an embedded
	// server. Bus, when set, is used instead (tests share one).
	NATS string
	Bus  *bus.Bus
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

	Tokenizer       string // TokenizerDefault, TokenizerEngine or a tokenizer.json path
	TokenizeCache   int
	ChatTemplate    string
	TokenizerConfig string

	Weights     cost.Weights
	Temperature float64
	Routing     string // --routing: kv, round-robin, random, least-loaded

	HintPolicy            string
	HintMinBlocks         int
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

	// Replica names this router on the load subject (default random).
	Replica string
	// PeerEvery and PeerTimeout pace load sharing between replicas.
	PeerEvery, PeerTimeout time.Duration
	// Tick paces expiry (approximate blocks, detached owners); block
	// counts are refreshed every SizeEvery.
	Tick, SizeEvery time.Duration

	Now func() time.Time
	Log *slog.Logger
	// Trace, when set, gets the timing of every request sent to a worker
	// (frontdoor.Server.Trace); for benchmarks, not a flag.
	Trace func(frontdoor.Timing)
}

// Defaults returns the flag defaults.
func Defaults() Options {
	return Options{
		Listen: ":8080", NATSListen: "127.0.0.1:0", Lease: 10 * time.Second, Bucket: discovery.DefaultBucket,
		Tokenizer: frontdoor.TokenizerDefault, TokenizeCache: 4096, ChatTemplate: "chatml",
		Weights:    cost.DefaultWeights(),
		HintPolicy: policyCost, HintMinBlocks: 1, HintBandwidthGbps: 10, HintSetup: 2 * time.Millisecond,
		HintPrefillTokensPerS: 20000, KVBytesPerToken: 256 << 10,
		ApproxTTL: 120 * time.Second, DetachedOwnerTTL: 60 * time.Second, UpstreamIdleTimeout: upstream.DefaultIdleTimeout,
		HealthInterval: 2 * time.Second, HealthTimeout: time.Second, HealthDownAfter: 2, RetryReset: true,
		PeerEvery: 2 * time.Second, PeerTimeout: 10 * time.Second, Tick: time.Second, SizeEvery: 10 * time.Second,
	}
}

// hintPolicy returns the hint policy factory the options describe.
func (o *Options) hintPolicy() (func(blockSize int) (hints.Policy, error), error) {
	switch o.HintPolicy {
	case policyOff:
		return nil, nil // router.Config.NoHints: no policy is ever asked
	case policyMinBlocks:
		if o.HintMinBlocks < 1 {
			return nil, fmt.Errorf("%w: --hint-min-blocks %d must be at least 1", errOptions, o.HintMinBlocks)
		}
		p := hints.MinBlocks(o.HintMinBlocks)
		return func(int) (hints.Policy, error) { return p, nil }, nil
	case policyCost:
		f := func(bs int) (hints.Policy, error) {
			return hints.NewCostPolicy(hints.Rates{
				BandwidthBytesPerS: o.HintBandwidthGbps * 1e9 / 8,
				SetupLatency:       o.HintSetup,
				PrefillTokensPerS:  o.HintPrefillTokensPerS,
				BytesPerBlock:      o.KVBytesPerToken * int64(bs),
				BlockSize:          bs,
			}, nil)
		}
		if _, err := f(direct.DefaultBlockSize); err != nil {
			return nil, fmt.Errorf("%w: --hint-bandwidth-gbps, --hint-setup-ms, --hint-prefill-tokens-per-s and --kv-bytes-per-token must be positive: %v",
				errOptions, err)
		}
		return f, nil
	}
	return nil, fmt.Errorf("%w: --hint-policy %q: want %s, %s or %s", errOptions, o.HintPolicy, policyCost, policyMinBlocks, policyOff)
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
	if o.HealthInterval < 0 {
		return fmt.Errorf("%w: --health-interval %v must not be negative", errOptions, o.HealthInterval)
	}
	if o.HealthTimeout <= 0 {
		return fmt.Errorf("%w: --health-timeout %v must be positive", errOptions, o.HealthTimeout)
	}
	if o.HealthDownAfter < 1 {
		return fmt.Errorf("%w: --health-down-after %d must be at least 1", errOptions, o.HealthDownAfter)
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

// newTokenizer builds the tokenizer --tokenizer names.
func (o *Options) newTokenizer(client *http.Client, r *router.Router) (frontdoor.Tokenizer, error) {
	if o.Tokenizer == frontdoor.TokenizerEngine {
		if o.TokenizeCache < 0 {
			return nil, fmt.Errorf("%w: --tokenize-cache %d must not be negative", errOptions, o.TokenizeCache)
		}
		return frontdoor.NewEngine(client, func(model string) []string {
			var urls []string
			for _, w := range r.WorkersOf(model) {
				urls = append(urls, w.URL)
			}
			return urls
		}, o.TokenizeCache), nil
	}
	tmpl, err := frontdoor.LoadTemplate(o.ChatTemplate, o.TokenizerConfig)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errOptions, err)
	}
	if o.Tokenizer == frontdoor.TokenizerDefault || o.Tokenizer == "" {
		return &frontdoor.Local{Tok: tokenizer.Default(), Template: tmpl}, nil
	}
	tok, err := tokenizer.LoadFile(o.Tokenizer)
	if err != nil {
		return nil, fmt.Errorf("%w: --tokenizer %s: %v", errOptions, o.Tokenizer, err)
	}
	return &frontdoor.Local{Tok: tok, Template: tmpl}, nil
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

// Service is a running router service.
type Service struct {
	Addr   string // the bound listen address
	Server *frontdoor.Server
	Router *router.Router
	Bus    *bus.Bus

	cancel context.CancelFunc
	http   *http.Server
	wg     sync.WaitGroup
	ownBus bool
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
	policy, err := o.hintPolicy()
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
	tok, err := o.newTokenizer(client, r)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	admin.Register(reg, r.Stats)
	svc := &Service{Router: r, Bus: o.Bus}
	if svc.Bus == nil {
		bo := bus.Options{URL: o.NATS, Name: "kvrouter-serve", Logger: o.Log}
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
			o.Log.Info("started embedded NATS; point agents and other replicas at it with --nats", "url", svc.Bus.URL)
		}
	}
	fail := func(err error) (*Service, error) {
		if svc.ownBus {
			svc.Bus.Close()
		}
		return nil, err
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

	peers := loadshare.NewPeers(svc.Bus.Conn, o.Replica, r.Load(), o.PeerEvery, o.PeerTimeout, loadshare.NewMetrics(reg), o.Log, o.Now)
	up := &upstream.Client{IdleTimeout: o.UpstreamIdleTimeout}
	svc.Server = &frontdoor.Server{Router: r, Tok: tok, Upstream: up, Metrics: frontdoor.NewMetrics(reg, up), Log: o.Log, Now: o.Now, Load: peers,
		AllowTargetOverride: o.AllowTargetOverride, Replica: o.Replica, Trace: o.Trace, RetryReset: o.RetryReset}
	mux := http.NewServeMux()
	svc.Server.Mount(mux)
	(&admin.Views{Router: r, Front: svc.Server, Gatherer: reg}).Mount(mux)
	svc.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	ctx, svc.cancel = context.WithCancel(context.WithoutCancel(ctx))
	run := func(f func()) { svc.wg.Go(f) }
	run(func() {
		if err := svc.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			o.Log.Error("http server stopped", "err", err)
		}
	})
	// Agents' registrations are unknown until the first watch is in step.
	r.SetDiscoveryLive(false)
	disc := &follow.Discovery{Registry: registry, Router: r, NC: svc.Bus.Conn, Metrics: follow.NewMetrics(reg), Log: o.Log, Now: o.Now}
	run(func() { disc.Run(ctx) })
	fleet := &direct.Fleet{Specs: o.Workers, EventsBind: o.EventsBind, Router: r, Client: client, Metrics: direct.NewMetrics(reg), Log: o.Log, Now: o.Now}
	run(func() { fleet.Run(ctx) })
	run(func() {
		if err := peers.Run(ctx); err != nil {
			o.Log.Error("load sharing with replicas stopped", "err", err)
		}
	})
	prober := &enginehealth.Prober{Router: r, Client: client, Timeout: o.HealthTimeout, Log: o.Log, Now: o.Now}
	run(func() { prober.Run(ctx) })
	if o.EngineMetricsInterval > 0 {
		em := &enginemetrics.Poller{Router: r, Client: client, Interval: o.EngineMetricsInterval, Log: o.Log}
		run(func() { em.Run(ctx) })
	}
	run(func() { housekeep(ctx, r, o) })
	o.Log.Info("kvrouter serving", "listen", svc.Addr, "replica", o.Replica, "workers_by_flag", len(o.Workers))
	return svc, nil
}

// housekeep expires what has a TTL and recounts block sizes.
func housekeep(ctx context.Context, r *router.Router, o Options) {
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
		case <-sizes.C:
			r.RefreshSizes()
		}
	}
}

// Close stops serving and every service, waiting for them.
func (svc *Service) Close() error {
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := svc.http.Shutdown(sctx)
	if err != nil {
		// Streams still running past the grace period are cut.
		svc.http.Close()
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
