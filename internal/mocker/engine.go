// This file holds Engine: its start (HTTP, runners, publishers per rank), endpoints and close.

package mocker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"kvrouter/internal/kvstream"
	"kvrouter/internal/runner"
	"kvrouter/internal/tokenizer"
)

// Engine is a running simulated engine: the HTTP API, one scheduler, GPU
// pool, runner (one shard per TP rank) and event publisher per DP rank.
type Engine struct {
	cfg     Config
	log     *slog.Logger
	model   *tokenizer.Model
	tok     *tokenizer.Tokenizer // model.Tok
	vocab   *vocab
	ranks   []*rank
	metrics *metrics
	pd      *disagg
	nonce   string
	reqSeq  atomic.Uint64
	// pullSetupNS is Config.PullSetup, which POST /admin/pull changes at
	// run time: a fleet whose pulls turn slow.
	pullSetupNS atomic.Int64

	ln     net.Listener
	srv    *http.Server
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// Start builds an engine from cfg, binds its HTTP listener, runner control
// ports and event sockets, and starts serving. Close stops it.
func Start(cfg Config) (*Engine, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	model, err := cfg.model()
	if err != nil {
		return nil, err
	}
	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	e := &Engine{cfg: cfg, log: cfg.Logger, model: model, tok: model.Tok, nonce: hex.EncodeToString(nonce[:])}
	e.vocab = newVocab(e.tok)
	e.pullSetupNS.Store(int64(cfg.PullSetup))
	if e.ln, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("mocker: --listen %s: %w", cfg.Listen, err)
	}
	ok := false
	defer func() {
		if !ok {
			e.shutdown()
		}
	}()
	topic := e.cfg.Topic
	if cfg.EventsConnect != "" && topic == "" {
		// llm-d's convention lets one bound subscriber tell publishers apart.
		topic = "kv@" + net.JoinHostPort(cfg.AdvertiseHost, strconv.Itoa(e.httpPort())) + "@" + cfg.Model
	}
	e.cfg.Topic = topic
	for d := range cfg.DP {
		r := newRank(d, &e.cfg, e.vocab)
		r.topic = topic
		if cfg.SnapshotEndpoint != "" {
			// Like SGLang's publisher: an epoch of its own per rank, named
			// on every live topic (before a runner shard suffix).
			var b [16]byte
			_, _ = rand.Read(b[:])
			r.epoch = hex.EncodeToString(b[:])
			r.topic += kvstream.EpochSuffix(r.epoch)
		}
		e.ranks = append(e.ranks, r)
		if err := e.startRunners(r); err != nil {
			return nil, err
		}
		if err := e.startPublisher(r); err != nil {
			return nil, err
		}
	}
	e.metrics = newMetrics(e)
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.pd = newDisagg(e, ctx)
	if err := e.pd.start(); err != nil {
		return nil, err
	}
	for _, r := range e.ranks {
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			r.run(ctx)
		}()
	}
	e.srv = &http.Server{
		Handler:           e.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		// Handlers end with the engine: a stream waiting on a stopped
		// scheduler would otherwise hold Shutdown.
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		if err := e.srv.Serve(e.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.log.Error("HTTP server stopped", "err", err)
		}
	}()
	ok = true
	e.log.Info("mocker serving", "flavor", cfg.Flavor, "role", cfg.Role, "http", e.ln.Addr().String(), "dp", cfg.DP, "tp", cfg.TP,
		"block_size", cfg.BlockSize, "control_port", cfg.ControlPort, "events", cfg.EventsEndpoint)
	return e, nil
}

func (e *Engine) httpPort() int { return e.ln.Addr().(*net.TCPAddr).Port }

func (e *Engine) startRunners(r *rank) error {
	bb := e.cfg.blockBytes() / e.cfg.TP
	tcp := runner.TCPConfig{BlockBytes: bb, Logger: e.log}
	if e.cfg.RunnerSecret != "" {
		tcp.Secret = []byte(e.cfg.RunnerSecret)
	}
	for t := range e.cfg.TP {
		tr, err := runner.NewTCPTransport(tcp)
		if err != nil {
			return fmt.Errorf("mocker: runner transport: %w", err)
		}
		r.tier.transports = append(r.tier.transports, tr)
		run, err := runner.New(runner.Config{
			BlockBytes: bb, Capacity: e.cfg.RunnerBlocks, Sink: r.sink(t), Transport: tr, Logger: e.log,
		})
		if err != nil {
			return fmt.Errorf("mocker: --runner-blocks: %w", err)
		}
		r.tier.runners = append(r.tier.runners, run)
		port := e.cfg.controlPort(r.id, t)
		l, err := net.Listen("tcp", net.JoinHostPort(e.cfg.controlBindHost(), strconv.Itoa(port)))
		if err != nil {
			return fmt.Errorf("mocker: --control-port: runner of DP rank %d TP rank %d: %w", r.id, t, err)
		}
		srv, err := runner.NewServer(run, tcp)
		if err != nil {
			l.Close()
			return fmt.Errorf("mocker: runner server: %w", err)
		}
		r.tier.servers = append(r.tier.servers, srv)
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			if err := srv.Serve(l); err != nil {
				e.log.Error("runner server stopped", "dp_rank", r.id, "tp_rank", t, "err", err)
			}
		}()
	}
	return nil
}

func (e *Engine) startPublisher(r *rank) error {
	base, flag := e.cfg.EventsEndpoint, "kv-events-endpoint"
	if e.cfg.EventsConnect != "" {
		base, flag = e.cfg.EventsConnect, "kv-events-connect"
	}
	ep, err := kvstream.EndpointForRank(base, r.id)
	if err != nil {
		return configErr(flag, "%v", err)
	}
	pc := kvstream.PublisherConfig{Endpoint: ep, Logger: e.log}
	if e.cfg.ReplayEndpoint != replayNone {
		if pc.ReplayEndpoint, err = kvstream.EndpointForRank(e.cfg.ReplayEndpoint, r.id); err != nil {
			return configErr("kv-events-replay-endpoint", "%v", err)
		}
	}
	if e.cfg.SnapshotEndpoint != "" {
		pc.Snapshot = kvstream.SnapshotServerConfig{Topic: e.cfg.Topic, Epoch: r.epoch, ReplicaRank: r.id}
		if pc.Snapshot.Endpoint, err = kvstream.EndpointForRank(e.cfg.SnapshotEndpoint, r.id); err != nil {
			return configErr("kv-events-snapshot-endpoint", "%v", err)
		}
	}
	if r.pub, err = kvstream.NewPublisher(pc); err != nil {
		return fmt.Errorf("mocker: --%s: DP rank %d: %w", flag, r.id, err)
	}
	return nil
}

// Addr is the HTTP listener's address.
func (e *Engine) Addr() net.Addr { return e.ln.Addr() }

// URL is the base URL of the HTTP API.
func (e *Engine) URL() string { return "http://" + e.ln.Addr().String() }

// ControlEndpoint is the advertised runner endpoint of DP rank d (its TP
// rank 0), the endpoint a hint names.
func (e *Engine) ControlEndpoint(d int) string {
	return "tcp://" + net.JoinHostPort(e.cfg.AdvertiseHost, strconv.Itoa(e.cfg.controlPort(d, 0)))
}

// EventEndpoint is a dialable address of DP rank d's event publisher, or ""
// when it dials out.
func (e *Engine) EventEndpoint(d int) string {
	if a := e.ranks[d].pub.Addr(); a != nil {
		return "tcp://" + net.JoinHostPort(e.cfg.AdvertiseHost, strconv.Itoa(a.(*net.TCPAddr).Port))
	}
	return ""
}

// SnapshotEndpoint is a dialable address of DP rank d's snapshot-v1
// ROUTER, or "".
func (e *Engine) SnapshotEndpoint(d int) string {
	if a := e.ranks[d].pub.SnapshotAddr(); a != nil {
		return "tcp://" + net.JoinHostPort(e.cfg.AdvertiseHost, strconv.Itoa(a.(*net.TCPAddr).Port))
	}
	return ""
}

// ReplayEndpoint is a dialable address of DP rank d's replay ROUTER, or "".
func (e *Engine) ReplayEndpoint(d int) string {
	if a := e.ranks[d].pub.ReplayAddr(); a != nil {
		return "tcp://" + net.JoinHostPort(e.cfg.AdvertiseHost, strconv.Itoa(a.(*net.TCPAddr).Port))
	}
	return ""
}

// Idle waits until no request is queued or running on any rank, and every
// client-visible effect of the finished ones (blocks freed) has happened.
func (e *Engine) Idle(ctx context.Context) error {
	for _, r := range e.ranks {
		if err := r.idle(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Close stops serving and releases every socket.
func (e *Engine) Close() error {
	e.shutdown()
	return nil
}

func (e *Engine) shutdown() {
	e.once.Do(func() {
		if e.cancel != nil {
			e.cancel()
		}
		if e.srv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = e.srv.Shutdown(ctx)
			cancel()
			_ = e.srv.Close()
		} else if e.ln != nil {
			e.ln.Close()
		}
		if e.pd != nil {
			e.pd.close()
		}
		for _, r := range e.ranks {
			r.tier.close()
		}
		e.wg.Wait()
		for _, r := range e.ranks {
			if r.pub != nil {
				_ = r.pub.Close()
			}
		}
	})
}
