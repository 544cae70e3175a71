// Package cluster starts a whole kvrouter deployment on this machine as
// separate OS processes, the way it runs in production: an embedded NATS
// server (or a cluster of them) in the calling process, simulated engines (`kvrouter mocker`),
// one state agent per engine (`kvrouter agent`) and routers
// (`kvrouter serve`), all on loopback ports. It is what `kvrouter demo` and
// the end-to-end tests and benchmarks stand on.
//
// Every child runs in its own process group and, on Linux, dies with the
// caller; Stop ends them with SIGTERM, then SIGKILL after a grace period.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"kvrouter/internal/bus"
)

// Defaults.
const (
	DefaultReadyTimeout = 60 * time.Second
	DefaultStopGrace    = 5 * time.Second
	DefaultLogLevel     = "info"
	// Model is the model every engine serves (the mocker's default).
	Model = "kvrouter-demo"
	// startAttempts covers losing a port to another program between our
	// check and the child's bind.
	startAttempts = 3
	loopback      = "127.0.0.1"
)

// allocate is allocPorts; a test takes a port away behind its back.
var allocate = allocPorts

// ErrOptions marks options that cannot make a cluster.
var ErrOptions = errors.New("cluster: bad options")

// Options describes a cluster. Zero engine sizes and timings leave the
// mocker's own defaults in force.
type Options struct {
	// Binary is the kvrouter executable the children run; empty re-executes
	// the current one.
	Binary string
	// Engines is the number of engines, each with its state agent (default 1).
	Engines int
	// WorkerIDs name the workers in discovery, one per engine; default
	// "A", "B", "C", ...
	WorkerIDs []string
	// Flavor is the engine imitated: "sglang" (default) or "vllm".
	Flavor string

	BlockSize       int
	KVBytesPerToken int
	GPUBlocks       int // per DP rank
	RunnerBlocks    int // per runner shard
	PrefillPerToken time.Duration
	DecodePerToken  time.Duration
	Speedup         float64
	TP, DP          int // per engine, default 1
	// Roles gives each engine its part in disaggregated serving (mocker
	// --role: "prefill", "decode"; "" aggregated); nil: all aggregated.
	Roles []string
	// EngineFlags are added to every `kvrouter mocker` command line.
	EngineFlags []string
	// AgentFlags are added to every `kvrouter agent` command line.
	AgentFlags []string

	// RouterFlags start one router per entry, each with these extra
	// `kvrouter serve` flags; nil starts one router with none.
	RouterFlags [][]string

	// NATSServers is how many embedded NATS servers run (default 1). More
	// than one are joined by cluster routes, with JetStream on each; the
	// agent of engine i and the i-th router started are given server
	// i mod NATSServers (the first running one from there), so that a
	// server stopped takes some agents and routers with it, which then
	// fail over to the servers they learnt from it.
	NATSServers int

	// LogDir receives one log file per process; empty makes a temporary
	// directory, removed by a clean Stop unless KeepLogs.
	LogDir   string
	KeepLogs bool
	// LogLevel is the children's --log-level (default info).
	LogLevel string

	ReadyTimeout time.Duration // default DefaultReadyTimeout
	StopGrace    time.Duration // default DefaultStopGrace
	Logger       *slog.Logger
}

// Engine is one running engine and its agent.
type Engine struct {
	ID  string // worker id in discovery
	URL string // OpenAI HTTP API, admin and /health
	// Control holds the runners' peer control endpoints by attention rank
	// (DP rank d, TP rank t: d*TP + t); a hint names the TP rank 0 one.
	Control []string
	// Events and Replay are each DP rank's KV event endpoints: the engine
	// dials Events, which its agent binds, and serves replays on Replay.
	Events, Replay []string
	TP, DP         int
	PID, AgentPID  int

	// Snapshot are an SGLang engine's snapshot-v1 endpoints per DP rank.
	Snapshot []string
	// Role is the engine's mocker --role ("" aggregated); Bootstrap its
	// bootstrap server's port when it is an SGLang prefill engine.
	Role      string
	Bootstrap int
}

// ControlEndpoint is the runner endpoint hints name for DP rank d.
func (e Engine) ControlEndpoint(d int) string { return e.Control[d*e.TP] }

// Router is one running router.
type Router struct {
	URL string
	// Admin is the base URL of its operator views (/metrics, /debug/*).
	Admin string
	Flags []string
	PID   int
	proc  *proc
}

// Cluster is a running local deployment.
type Cluster struct {
	opts    Options
	bin     string
	bus     *bus.Bus     // the one embedded server, or nil
	nats    *bus.Cluster // the embedded servers, with NATSServers > 1
	logDir  string
	ownDir  bool
	log     *slog.Logger
	engines []Engine

	mu    sync.Mutex
	procs []*proc // engines and agents, in start order
	// engineProcs and agentProcs parallel engines.
	engineProcs, agentProcs []*proc
	routers                 []Router
	stopped                 bool
	// routersStarted numbers the routers' log files.
	routersStarted int
}

// NATSURL is the embedded NATS server's client URL; with several servers,
// every server's, comma-separated.
func (c *Cluster) NATSURL() string {
	if c.nats != nil {
		return c.nats.URLs()
	}
	return c.bus.URL
}

// natsFor is the NATS URL the i-th agent or router is given: server i mod
// NATSServers, or the next one running.
func (c *Cluster) natsFor(i int) string {
	if c.nats == nil {
		return c.bus.URL
	}
	n := c.nats.Servers()
	for k := range n {
		if j := (i + k) % n; c.nats.Running(j) {
			return c.nats.URL(j)
		}
	}
	return c.nats.URL(i % n)
}

// LogDir is where every process's log is.
func (c *Cluster) LogDir() string { return c.logDir }

// Engines are the engines, in WorkerIDs order.
func (c *Cluster) Engines() []Engine { return c.engines }

// Routers are the routers running now, in start order.
func (c *Cluster) Routers() []Router {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Router(nil), c.routers...)
}

// RouterURL is the first router's base URL.
func (c *Cluster) RouterURL() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.routers) == 0 {
		return ""
	}
	return c.routers[0].URL
}

// RouterAdminURL is the base URL of the first router's operator views.
func (c *Cluster) RouterAdminURL() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.routers) == 0 {
		return ""
	}
	return c.routers[0].Admin
}

// PIDs lists every child process, routers included.
func (c *Cluster) PIDs() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	for _, p := range c.procs {
		out = append(out, p.PID())
	}
	for _, r := range c.routers {
		out = append(out, r.PID)
	}
	return out
}

func (o *Options) fill() error {
	if o.Engines == 0 {
		o.Engines = 1
	}
	if o.Flavor == "" {
		o.Flavor = "sglang"
	}
	if o.TP == 0 {
		o.TP = 1
	}
	if o.DP == 0 {
		o.DP = 1
	}
	if o.LogLevel == "" {
		o.LogLevel = DefaultLogLevel
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = DefaultReadyTimeout
	}
	if o.StopGrace <= 0 {
		o.StopGrace = DefaultStopGrace
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.RouterFlags == nil {
		o.RouterFlags = [][]string{nil}
	}
	if o.NATSServers == 0 {
		o.NATSServers = 1
	}
	switch {
	case o.Engines < 1:
		return fmt.Errorf("%w: %d engines: --engines must be at least 1", ErrOptions, o.Engines)
	case o.Flavor != "sglang" && o.Flavor != "vllm":
		return fmt.Errorf("%w: flavor %q: --flavor must be sglang or vllm", ErrOptions, o.Flavor)
	case o.TP < 1 || o.DP < 1:
		return fmt.Errorf("%w: tp %d, dp %d: --tp and --dp must be at least 1", ErrOptions, o.TP, o.DP)
	case o.NATSServers < 1:
		return fmt.Errorf("%w: %d NATS servers: want at least 1", ErrOptions, o.NATSServers)
	case o.WorkerIDs != nil && len(o.WorkerIDs) != o.Engines:
		return fmt.Errorf("%w: %d worker ids for %d engines", ErrOptions, len(o.WorkerIDs), o.Engines)
	case o.Roles != nil && len(o.Roles) != o.Engines:
		return fmt.Errorf("%w: %d roles for %d engines", ErrOptions, len(o.Roles), o.Engines)
	}
	if o.WorkerIDs == nil {
		for i := range o.Engines {
			o.WorkerIDs = append(o.WorkerIDs, workerID(i))
		}
	}
	seen := map[string]bool{}
	for _, id := range o.WorkerIDs {
		if id == "" || seen[id] {
			return fmt.Errorf("%w: worker ids %q must be distinct and non-empty", ErrOptions, o.WorkerIDs)
		}
		seen[id] = true
	}
	return nil
}

// workerID is "A".."Z", then "W26", "W27", ...
func workerID(i int) string {
	if i < 26 {
		return string(rune('A' + i))
	}
	return "W" + strconv.Itoa(i)
}

// enginePorts is how many ports one engine binds: HTTP, a runner per
// attention rank, events, replay and (SGLang) snapshots per DP rank, and
// a bootstrap server (used by SGLang prefill engines only).
func (o *Options) enginePorts() int {
	n := 1 + o.DP*o.TP + 2*o.DP + 1
	if o.snapshots() {
		n += o.DP
	}
	return n
}

// Start brings the cluster up and waits until every router sees every
// worker with its sources ready. On failure nothing is left running and
// the error quotes the failing process's log. Cancelling ctx aborts the
// start; the cluster itself lives until Stop.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	bin := opts.Binary
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("cluster: find the kvrouter binary to run: %w", err)
		}
		bin = exe
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%w: binary: %w", ErrOptions, err)
	}
	dir, own := opts.LogDir, false
	if dir == "" {
		d, err := os.MkdirTemp("", "kvrouter-cluster-")
		if err != nil {
			return nil, fmt.Errorf("cluster: log dir: %w", err)
		}
		dir, own = d, true
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cluster: --log-dir: %w", err)
	}
	c := &Cluster{opts: opts, bin: bin, logDir: dir, ownDir: own, log: opts.Logger}
	err := c.startNATS(ctx)
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		err = c.start(ctx)
		if err == nil {
			return c, nil
		}
		retry := attempt < startAttempts && ctx.Err() == nil && c.lostPort()
		c.stopChildren()
		if !retry {
			break
		}
		c.log.Warn("cluster: a port was taken meanwhile; retrying on others", "attempt", attempt, "err", err)
	}
	c.closeNATS()
	return nil, fmt.Errorf("%w (logs kept in %s)", err, dir)
}

// startNATS starts the embedded server, or the cluster of them on ports
// below the ephemeral range, where a stopped server finds its ports free
// again.
func (c *Cluster) startNATS(ctx context.Context) error {
	n := c.opts.NATSServers
	if n == 1 {
		b, err := bus.Open(ctx, bus.Options{Name: "kvrouter-cluster", Logger: c.opts.Logger})
		if err != nil {
			return fmt.Errorf("cluster: embedded nats: %w", err)
		}
		c.bus = b
		return nil
	}
	var err error
	for attempt := range startAttempts {
		var pr portRange
		if pr, err = allocate(2 * n); err != nil {
			return err
		}
		o := bus.ClusterOptions{Servers: n, Host: loopback, StoreDir: filepath.Join(c.logDir, "nats-"+strconv.Itoa(attempt))}
		for i := range n {
			o.ClientPorts = append(o.ClientPorts, pr.Base+i)
			o.RoutePorts = append(o.RoutePorts, pr.Base+n+i)
		}
		if c.nats, err = bus.StartCluster(o); err == nil {
			return nil
		}
	}
	return fmt.Errorf("cluster: embedded nats cluster: %w", err)
}

func (c *Cluster) closeNATS() {
	if c.bus != nil {
		c.bus.Close()
	}
	if c.nats != nil {
		c.nats.Close()
	}
}

// start runs one attempt with a fresh port range.
func (c *Cluster) start(ctx context.Context) error {
	o := &c.opts
	pr, err := allocate(o.Engines*o.enginePorts() + routerPorts*len(o.RouterFlags))
	if err != nil {
		return err
	}
	cur := pr.cursor()
	c.routersStarted = 0 // a retry appends to the same logs
	c.engines = make([]Engine, o.Engines)
	c.engineProcs, c.agentProcs = make([]*proc, o.Engines), make([]*proc, o.Engines)
	for i := range c.engines {
		e := newEngine(o, o.WorkerIDs[i], cur)
		if o.Roles != nil {
			e.Role = o.Roles[i]
		}
		if e.Role != "prefill" || o.Flavor != "sglang" {
			e.Bootstrap = 0
		}
		p, err := c.spawn("engine-"+e.ID, engineArgs(o, e))
		if err != nil {
			return err
		}
		e.PID = p.PID()
		c.engines[i], c.engineProcs[i] = e, p
	}
	for i, e := range c.engines {
		p, err := c.spawn("agent-"+e.ID, agentArgs(o, e, c.natsFor(i)))
		if err != nil {
			return err
		}
		c.engines[i].AgentPID, c.agentProcs[i] = p.PID(), p
	}
	var routers []Router
	for _, flags := range o.RouterFlags {
		r, err := c.spawnRouter(cur.take(routerPorts), flags)
		if err != nil {
			return err
		}
		routers = append(routers, r)
	}
	ctx, cancel := context.WithTimeout(ctx, o.ReadyTimeout)
	defer cancel()
	if err := c.waitEngines(ctx); err != nil {
		return err
	}
	for _, r := range routers {
		if err := c.waitRouter(ctx, r, true); err != nil {
			return err
		}
	}
	c.log.Info("cluster ready", "engines", len(c.engines), "routers", len(routers), "router", c.RouterURL(), "logs", c.logDir)
	return nil
}

func (c *Cluster) spawn(name string, args []string) (*proc, error) {
	p, err := startProc(c.bin, c.logDir, name, args)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p, nil
}

// routerPorts are a router's ports: the OpenAI front door, then the
// operator views.
const routerPorts = 2

func (c *Cluster) spawnRouter(port int, flags []string) (Router, error) {
	c.mu.Lock()
	n := c.routersStarted
	name := "router-" + strconv.Itoa(n)
	c.routersStarted++
	c.mu.Unlock()
	args := []string{"serve", "--listen", hostPort(port), "--admin-listen", hostPort(port + 1), "--nats", c.natsFor(n),
		"--log-level", c.opts.LogLevel}
	if !slices.Contains(flags, "--tokenizer") {
		// The simulated engines tokenize with the embedded demo tokenizer.
		args = append(args, "--tokenizer", "demo")
	}
	args = append(args, flags...)
	p, err := startProc(c.bin, c.logDir, name, args)
	if err != nil {
		return Router{}, err
	}
	r := Router{URL: "http://" + hostPort(port), Admin: "http://" + hostPort(port+1), Flags: flags, PID: p.PID(), proc: p}
	c.mu.Lock()
	c.routers = append(c.routers, r)
	c.mu.Unlock()
	return r, nil
}

// AddRouter starts another router with these `kvrouter serve` flags and
// waits until it sees every worker ready: a benchmark can run one policy
// after another against the same warm engines.
func (c *Cluster) AddRouter(ctx context.Context, flags []string) (Router, error) {
	pr, err := allocate(routerPorts)
	if err != nil {
		return Router{}, err
	}
	r, err := c.spawnRouter(pr.Base, flags)
	if err != nil {
		return Router{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.ReadyTimeout)
	defer cancel()
	// The agents' snapshots carry readiness; poking the engines would wipe
	// the caches the benchmark wants warm.
	if err := c.waitRouter(ctx, r, false); err != nil {
		return r, errors.Join(err, c.StopRouter(r))
	}
	return r, nil
}

// StopRouter stops one router.
func (c *Cluster) StopRouter(r Router) error {
	c.mu.Lock()
	for i := range c.routers {
		if c.routers[i].proc == r.proc {
			c.routers = append(c.routers[:i], c.routers[i+1:]...)
			break
		}
	}
	c.mu.Unlock()
	return r.proc.stop(c.opts.StopGrace)
}

// Stop ends every process (routers first, then agents, so that they
// deregister while NATS still runs, then engines) and NATS. Logs are
// removed only when everything stopped cleanly, the directory was ours and
// KeepLogs is off. Stop is safe to call more than once.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return nil
	}
	c.stopped = true
	c.mu.Unlock()
	err := c.stopChildren()
	c.closeNATS()
	if err != nil {
		return fmt.Errorf("%w (logs kept in %s)", err, c.logDir)
	}
	if c.ownDir && !c.opts.KeepLogs {
		os.RemoveAll(c.logDir)
	}
	return nil
}

// stopChildren stops routers, then agents, then engines, each group in
// parallel, and forgets them.
func (c *Cluster) stopChildren() error {
	c.mu.Lock()
	var routers, agents, engines []*proc
	for _, r := range c.routers {
		routers = append(routers, r.proc)
	}
	for _, p := range c.procs {
		if isAgent(p) {
			agents = append(agents, p)
		} else {
			engines = append(engines, p)
		}
	}
	c.routers, c.procs = nil, nil
	c.mu.Unlock()
	var errs []error
	for _, group := range [][]*proc{routers, agents, engines} {
		errs = append(errs, stopAll(group, c.opts.StopGrace)...)
	}
	return errors.Join(errs...)
}

func isAgent(p *proc) bool { return len(p.args) > 0 && p.args[0] == "agent" }

func stopAll(ps []*proc, grace time.Duration) []error {
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() { errs[i] = p.stop(grace) })
	}
	wg.Wait()
	return errs
}

// lostPort reports whether a child failed to bind one of its ports.
func (c *Cluster) lostPort() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	all := append([]*proc(nil), c.procs...)
	for _, r := range c.routers {
		all = append(all, r.proc)
	}
	for _, p := range all {
		if p.exited() && p.logSays("address already in use") {
			return true
		}
	}
	return false
}

func hostPort(port int) string { return loopback + ":" + strconv.Itoa(port) }
