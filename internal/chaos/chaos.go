// Package chaos runs a local kvrouter deployment under steady load while it
// injects faults at random, then checks what clients got and whether every
// router's index came back to the engines' ground truth.
//
// The deployment (internal/cluster) is a three-server NATS cluster in this
// process, mocker engines each with its state agent, and two router
// replicas on different NATS servers. The faults: engines killed (-9) and
// restarted, agents killed and restarted, a router replica killed and
// restarted, engines frozen (SIGSTOP) and resumed, the engine a hinted
// request pulls from killed during the pull, a NATS server stopped and
// started again. One fault runs at a time, each undone before the next.
//
// Every answer is checked against mocker.Reference: an engine's output is
// a function of the prompt, whatever cache or peer its blocks came from,
// so any other answer is wrong. Once the faults stop and the load ends,
// every router's GET /debug/inventory is compared with every engine's GET
// /admin/inventory until they agree or the settle bound passes.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"sync"
	"time"

	"kvrouter/internal/cluster"
	"kvrouter/internal/mocker"
)

// Defaults.
const (
	DefaultEngines = 4
	DefaultClients = 4
	DefaultSettle  = 60 * time.Second
	// blockSize and the engines' sizes: small caches, so that the load
	// makes engines evict and the inventories move.
	blockSize    = 16
	gpuBlocks    = 512
	runnerBlocks = 1024
	docs         = 24
	// lease is the agents' and routers' registration lease: short, so that
	// a killed agent's registration lapses within the run.
	lease = "3s"
)

// ErrOptions marks options that cannot make a run.
var ErrOptions = errors.New("chaos: bad options")

// Options configure a run.
type Options struct {
	// Binary is the kvrouter executable the processes run; empty
	// re-executes this one.
	Binary   string
	Duration time.Duration // how long faults are injected
	Seed     uint64
	Engines  int // default DefaultEngines, at least 2
	Clients  int // concurrent clients, default DefaultClients
	// Settle bounds the wait for the indexes to agree with the engines
	// after the faults and the load stop (default DefaultSettle).
	Settle time.Duration
	LogDir string // keep the processes' logs there
	Logger *slog.Logger
}

// Result is a run's outcome, printed as one JSON object.
type Result struct {
	Requests     int            `json:"requests"`
	ClientErrors map[string]int `json:"client_errors"`
	// WrongOutputs counts answers whose text differs from the reference.
	WrongOutputs int `json:"wrong_outputs"`
	// InventoryDivergenceBlocks counts, once the cluster settled, blocks
	// that a router's index and the engine disagree on, over every router.
	InventoryDivergenceBlocks int `json:"inventory_divergence_blocks"`
	// LeakedGoroutines and LeakedFDs are this process's goroutines and
	// open files beyond those before the run, once the cluster stopped:
	// the NATS servers it ran and restarted, the clients, the process
	// supervision.
	LeakedGoroutines int            `json:"leaked_goroutines"`
	LeakedFDs        int            `json:"leaked_fds"`
	Faults           map[string]int `json:"faults"`

	Seed      uint64  `json:"seed"`
	DurationS float64 `json:"duration_s"`
	// SettleS is how long the indexes took to agree with the engines
	// after the load stopped (the bound when they never did).
	SettleS float64 `json:"settle_s"`
	WallS   float64 `json:"wall_s"`
	// PeerKillsWithoutHint counts peer kills whose request got no hint in
	// time: counted as engine kills.
	PeerKillsWithoutHint int      `json:"peer_kills_without_hint"`
	Divergence           []string `json:"divergence,omitempty"`
	WrongExamples        []string `json:"wrong_examples,omitempty"`
}

// OK is the pass condition: no wrong output, no divergence, no leak.
func (r Result) OK() bool {
	return r.WrongOutputs == 0 && r.InventoryDivergenceBlocks == 0 && r.LeakedGoroutines == 0 && r.LeakedFDs == 0
}

// Run starts the deployment, runs the load and the faults for
// o.Duration, lets the cluster settle and stops it. An error means the run
// could not be carried out; what it found is in the Result.
func Run(ctx context.Context, o Options) (Result, error) {
	if o.Engines == 0 {
		o.Engines = DefaultEngines
	}
	if o.Clients == 0 {
		o.Clients = DefaultClients
	}
	if o.Settle <= 0 {
		o.Settle = DefaultSettle
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	switch {
	case o.Duration <= 0:
		return Result{}, fmt.Errorf("%w: --duration %v must be positive", ErrOptions, o.Duration)
	case o.Engines < 2:
		return Result{}, fmt.Errorf("%w: %d engines: a peer pull needs at least 2", ErrOptions, o.Engines)
	case o.Clients < 1:
		return Result{}, fmt.Errorf("%w: %d clients: want at least 1", ErrOptions, o.Clients)
	}
	start := time.Now()
	goroutines, fds := runtime.NumGoroutine(), openFDs()
	res, err := run(ctx, o)
	res.Seed, res.DurationS = o.Seed, o.Duration.Seconds()
	// What the run started must be gone now: wait for goroutines that end
	// on their own (closed connections' readers) before counting.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if runtime.NumGoroutine() <= goroutines && openFDs() <= fds {
			break
		}
	}
	res.LeakedGoroutines = max(0, runtime.NumGoroutine()-goroutines)
	res.LeakedFDs = max(0, openFDs()-fds)
	res.WallS = time.Since(start).Seconds()
	return res, err
}

func run(ctx context.Context, o Options) (Result, error) {
	res := Result{ClientErrors: map[string]int{}, Faults: map[string]int{}}
	c, err := cluster.Start(ctx, cluster.Options{
		Binary: o.Binary, Engines: o.Engines, NATSServers: 3,
		BlockSize: blockSize, GPUBlocks: gpuBlocks, RunnerBlocks: runnerBlocks,
		// Fast engines with a peer pull that takes a while (50 ms of
		// simulated setup at this speed), so that a kill can land in it.
		Speedup: 20, EngineFlags: []string{"--pull-setup-ms", "1000"},
		AgentFlags:  []string{"--lease", lease},
		RouterFlags: [][]string{routerFlags(), routerFlags()},
		LogDir:      o.LogDir, KeepLogs: o.LogDir != "",
		Logger: o.Logger,
	})
	if err != nil {
		return res, err
	}
	stopped := false
	defer func() {
		if !stopped {
			c.Stop()
		}
	}()
	// Requests take milliseconds; a frozen engine holds one for seconds.
	hc := &http.Client{Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	ref := mocker.NewReference(mocker.Config{BlockSize: blockSize})
	t := &tally{errors: map[string]int{}}
	work := newWorkload(o.Seed, docs, blockSize)
	var routers []string
	for _, r := range c.Routers() {
		routers = append(routers, r.URL)
	}

	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for id := range o.Clients {
		cl := &client{id: id, routers: routers, work: work, ref: ref, hc: hc, tally: t,
			rng: rand.New(rand.NewPCG(o.Seed, uint64(id)+1))}
		wg.Go(func() { cl.run(loadCtx) })
	}
	in := &injector{c: c, rng: rand.New(rand.NewPCG(o.Seed, 0xfa17)), log: o.Logger, hc: hc, ref: ref, tally: t,
		faults: res.Faults}
	ferr := in.run(ctx, time.Now().Add(o.Duration))
	stopLoad()
	wg.Wait()
	res.PeerKillsWithoutHint = in.pullMisses
	t.mu.Lock()
	res.Requests, res.WrongOutputs, res.WrongExamples = t.requests, t.wrong, t.examples
	for k, v := range t.errors {
		res.ClientErrors[k] = v
	}
	t.mu.Unlock()
	if ferr != nil {
		return res, ferr
	}

	settleStart := time.Now()
	d, err := settle(ctx, c, o.Settle)
	res.SettleS = time.Since(settleStart).Seconds()
	res.InventoryDivergenceBlocks, res.Divergence = d.Blocks, d.Detail
	if err != nil {
		return res, err
	}
	stopped = true
	if err := c.Stop(); err != nil {
		return res, err
	}
	return res, nil
}

func routerFlags() []string {
	return []string{"--allow-target-override", "--hint-policy", "min-blocks", "--hint-min-blocks", "1",
		"--lease", lease, "--health-interval", "500ms"}
}

// settle polls the divergence until it is zero or bound passes, and
// returns the last one measured.
func settle(ctx context.Context, c *cluster.Cluster, bound time.Duration) (cluster.Divergence, error) {
	deadline := time.Now().Add(bound)
	for {
		d, err := c.Divergence(ctx)
		if err == nil && d.Blocks == 0 {
			return d, nil
		}
		if time.Now().After(deadline) {
			return d, err
		}
		sleep(ctx, 500*time.Millisecond)
		if ctx.Err() != nil {
			return d, ctx.Err()
		}
	}
}

// openFDs counts this process's open files (-1 where /proc is missing).
func openFDs() int {
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(es)
}
