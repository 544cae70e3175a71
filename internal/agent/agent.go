// This file holds the agent's options and its run: configuration, registration, event relay.

package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"kvrouter/internal/bus"
	"kvrouter/internal/discovery"
	"kvrouter/internal/kvstream"
	"kvrouter/internal/relay"
	"kvrouter/internal/runnerprobe"
	"kvrouter/internal/workerconfig"
)

// Defaults of the agent's options.
const (
	DefaultLease       = 10 * time.Second
	DefaultNATSTimeout = time.Minute
	DefaultEngineWait  = 15 * time.Minute
	DefaultEngineGrace = 15 * time.Second
	DefaultRunnerProbe = runnerprobe.DefaultInterval
	DefaultOwnerTTL    = runnerprobe.DefaultTTL
)

// Config is what `kvrouter agent` is told; field comments name the flags.
type Config struct {
	Engine     workerconfig.Engine // --engine
	EngineURL  string              // --engine-url: the engine's HTTP front
	ConfigFile string              // --config: read the configuration from a file instead
	EngineWait time.Duration       // --engine-wait: 0 waits forever
	// EngineGrace (--engine-grace) is how long health probes of the engine
	// may fail before its inventory is withdrawn; 0 disables probing.
	EngineGrace time.Duration
	// RunnerProbe (--runner-probe) is how often each runner's control
	// endpoint is asked for its start epoch; 0 disables probing, and a
	// cache owner is then reset with its engine.
	RunnerProbe time.Duration
	// OwnerTTL (--owner-ttl) is how long a cache owner's inventory is kept
	// while its runner does not answer.
	OwnerTTL      time.Duration
	WorkerID      string // --worker-id; default the engine URL's host:port
	AdvertiseHost string // --advertise-host
	SingleHost    bool   // --single-host
	DPStart       int    // --dp-start; negative takes it from the configuration

	NATSURL       string        // --nats
	NATSAuth      bus.Auth      // --nats-creds, --nats-tls-ca, ...
	EmbeddedNATS  bool          // --embedded-nats
	NATSTimeout   time.Duration // --nats-timeout
	Lease         time.Duration // --lease
	Bucket        string        // --discovery-bucket
	MetricsListen string        // --metrics-listen; empty: no metrics server

	// Environment, replaceable in tests.
	HTTPClient *http.Client
	ReadFile   func(string) ([]byte, error)
	Resolve    workerconfig.Resolver
	Backoff    kvstream.Backoff // retries of the engine and NATS
	Logger     *slog.Logger
}

// Agent is one worker's state agent.
type Agent struct {
	cfg  Config
	log  *slog.Logger
	core atomic.Pointer[Core]
	subs []*kvstream.Subscriber

	registered chan struct{}
	metrics    chan net.Addr
}

// New checks cfg's options and returns an agent; Run starts it.
func New(cfg Config) (*Agent, error) {
	if _, err := workerconfig.ParseEngine(string(cfg.Engine)); err != nil {
		return nil, fmt.Errorf("--engine: %w", err)
	}
	host, err := engineHostPort(cfg.EngineURL)
	if err != nil {
		return nil, err
	}
	if cfg.WorkerID == "" {
		cfg.WorkerID = host
	}
	switch {
	case cfg.NATSURL == "" && !cfg.EmbeddedNATS:
		return nil, errors.New("--nats is required (the cluster's NATS URL, e.g. nats://nats:4222); --embedded-nats runs a private server for tests")
	case cfg.NATSURL != "" && cfg.EmbeddedNATS:
		return nil, errors.New("--nats and --embedded-nats exclude each other")
	case cfg.Lease < time.Second:
		return nil, fmt.Errorf("--lease %v: must be at least 1s (NATS key-value TTL granularity)", cfg.Lease)
	case cfg.NATSTimeout <= 0:
		return nil, fmt.Errorf("--nats-timeout %v: must be positive", cfg.NATSTimeout)
	case cfg.EngineGrace < 0 || cfg.EngineWait < 0:
		return nil, errors.New("--engine-grace and --engine-wait must not be negative")
	}
	if err := (runnerprobe.Config{Interval: cfg.RunnerProbe, TTL: cfg.OwnerTTL}).Check(); err != nil {
		return nil, err
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.ReadFile == nil {
		cfg.ReadFile = os.ReadFile
	}
	if cfg.Resolve == nil {
		cfg.Resolve = net.LookupHost
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Agent{
		cfg: cfg, log: cfg.Logger.With("worker", cfg.WorkerID),
		registered: make(chan struct{}), metrics: make(chan net.Addr, 1),
	}, nil
}

// Registered is closed once the worker is registered.
func (a *Agent) Registered() <-chan struct{} { return a.registered }

// MetricsAddr delivers the metrics server's address once it listens.
func (a *Agent) MetricsAddr() <-chan net.Addr { return a.metrics }

// Stats returns the core's counters (zero before the core exists).
func (a *Agent) Stats() Stats {
	if c := a.core.Load(); c != nil {
		return c.Stats()
	}
	return Stats{}
}

// Run reads and validates the engine's configuration, registers the
// worker and relays its inventory until ctx ends. Then, in this order, it
// stops reading the engine, announces the sources gone (Core.Stop),
// flushes them to the NATS server, and deregisters: a router that reads
// the deregistration has been sent everything before it (docs/wire.md
// §9.6). It returns nil after a clean stop. Run an Agent once.
func (a *Agent) Run(ctx context.Context) error {
	d, err := a.descriptor(ctx)
	if err != nil {
		return err
	}
	b, err := a.openBus(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	reg, err := discovery.OpenNATS(ctx, b.JS, a.cfg.Bucket, a.cfg.Lease, a.log)
	if err != nil {
		return fmt.Errorf("agent: discovery: %w", err)
	}

	prefix := relay.Prefix(a.cfg.WorkerID)
	w := a.registration(d, prefix)
	var pub *relay.Publisher
	if len(d.Events) > 0 {
		pub = relay.NewPublisher(b.Conn, prefix, a.log)
		var opts []CoreOption
		if a.probesRunners(d) {
			opts = append(opts, ProbeRunners(d.TPRanksPerDPRank))
		}
		core, err := NewCore(a.cfg.WorkerID, d, pub, a.log, opts...)
		if err != nil {
			return err
		}
		a.core.Store(core)
		if err := pub.ServeSnapshots(core.States); err != nil {
			return fmt.Errorf("agent: %w", err)
		}
		defer pub.Close()
	} else {
		w.Events = ""
		a.log.Warn("agent: the engine publishes no KV events; registering a plain routing target without inventory", "option", "kv_events_config")
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	errs := make(chan error, 4)

	if core := a.core.Load(); core != nil {
		if err := a.relay(runCtx, &wg, core, d, errs); err != nil {
			return err
		}
	}
	if a.cfg.MetricsListen != "" {
		srv, err := a.serveMetrics(runCtx, &wg, b)
		if err != nil {
			return err
		}
		defer srv.Close()
	}
	if err := discovery.Announce(ctx, reg, w); err != nil {
		return fmt.Errorf("agent: register worker %q: %w", w.ID, err)
	}
	a.log.Info("agent: worker registered", "id", w.ID, "model", w.Model, "hint_capable", d.HintCapable,
		"dp_ranks", fmt.Sprintf("%d..%d", d.DPStart, d.DPStart+d.DPSize-1), "events", w.Events, "lease", reg.Lease())
	close(a.registered)
	// The lease outlives the relay: the deregistration is the last word.
	keepCtx, stopKeep := context.WithCancel(context.Background())
	defer stopKeep()
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		// The bucket's lease, which may not be --lease (a bucket made by
		// a process given another keeps its own).
		discovery.Keep(keepCtx, reg, w, reg.Lease()/3, a.log)
	}()

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errs:
	}
	stop()
	wg.Wait()
	if core := a.core.Load(); core != nil {
		core.Stop()
		if err := b.Conn.Flush(); err != nil {
			a.log.Warn("agent: could not flush the last messages", "err", err)
		}
	}
	stopKeep()
	<-kept
	a.log.Info("agent: stopped; worker deregistered", "id", w.ID)
	return runErr
}

func (a *Agent) descriptor(ctx context.Context) (*workerconfig.Descriptor, error) {
	var raw []byte
	var err error
	if a.cfg.ConfigFile != "" {
		if raw, err = a.cfg.ReadFile(a.cfg.ConfigFile); err != nil {
			return nil, fmt.Errorf("--config: %w", err)
		}
	} else if raw, err = fetchConfig(ctx, a.cfg.HTTPClient, a.cfg.Engine, a.cfg.EngineURL, a.cfg.EngineWait, a.cfg.Backoff, a.log); err != nil {
		return nil, err
	}
	opt := workerconfig.Options{
		AdvertiseHost: a.cfg.AdvertiseHost, AllowLoopback: a.cfg.SingleHost,
		ReadFile: a.cfg.ReadFile, Resolve: a.cfg.Resolve,
	}
	if a.cfg.DPStart >= 0 {
		opt.DPStart = &a.cfg.DPStart
	}
	d, err := workerconfig.Build(a.cfg.Engine, raw, opt)
	if err != nil {
		return nil, fmt.Errorf("%s engine configuration: %w", a.cfg.Engine, err)
	}
	for _, w := range d.Warnings {
		a.log.Warn("agent: engine configuration", "warning", w)
	}
	if !d.HintCapable {
		a.log.Warn("agent: worker takes no part in hints; it registers as a plain routing target", "refusal", d.Refusal)
	}
	return d, nil
}

// openBus connects to NATS, retrying until --nats-timeout: the agent may
// start before the cluster's NATS is reachable.
func (a *Agent) openBus(ctx context.Context) (*bus.Bus, error) {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.NATSTimeout)
	defer cancel()
	opts := bus.Options{URL: a.cfg.NATSURL, Auth: a.cfg.NATSAuth, Name: "kvrouter-agent " + a.cfg.WorkerID, Logger: a.log,
		ConnectTimeout: min(5*time.Second, a.cfg.NATSTimeout)}
	for attempt := 0; ; attempt++ {
		b, err := bus.Open(ctx, opts)
		if err == nil {
			return b, nil
		}
		if !errors.Is(err, bus.ErrUnreachable) {
			return nil, fmt.Errorf("agent: %w", err)
		}
		a.log.Warn("agent: NATS unreachable, retrying (check --nats)", "url", a.cfg.NATSURL, "attempt", attempt+1, "err", err)
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, fmt.Errorf("agent: gave up after --nats-timeout %v: %w", a.cfg.NATSTimeout, err)
			}
			return nil, ctx.Err()
		case <-time.After(a.cfg.Backoff.Delay(attempt)):
		}
	}
}

// registration is the worker's discovery record. A refused worker's
// descriptor has no runtime data and no owners: it registers as a plain
// routing target, never half-registered.
func (a *Agent) registration(d *workerconfig.Descriptor, prefix string) discovery.Worker {
	w := discovery.Worker{
		ID: a.cfg.WorkerID, Model: d.Model, URL: a.cfg.EngineURL, Engine: string(d.Engine),
		BlockSize: d.KVBlockSize, DPStart: d.DPStart, DPSize: d.DPSize, Events: prefix, Refusal: d.Refusal,
		Role: string(d.WorkerType), BootstrapPort: d.BootstrapPort,
	}
	for _, e := range d.RuntimeData {
		w.RuntimeData = append(w.RuntimeData, discovery.Field{Key: e.Key, Value: e.Value})
	}
	if len(d.OwnerIDs) > 0 {
		w.Owners = make(map[string]string, len(d.OwnerIDs))
		for r, id := range d.OwnerIDs {
			w.Owners[strconv.Itoa(r)] = id
		}
	}
	return w
}
