// This file holds the --worker flag: its parsing and the worker it describes.

package direct

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"kvrouter/internal/hints"
	"kvrouter/internal/kvstream"
	"kvrouter/internal/router"
	"kvrouter/internal/runnerprobe"
	"kvrouter/internal/workerconfig"
)

// errWorkerFlag marks a --worker value that does not parse.
var errWorkerFlag = errors.New("bad --worker")

// DefaultBlockSize is the block size of a --worker without block_size=,
// vLLM's default.
const DefaultBlockSize = 16

// WorkerSpec is one --worker: an engine the router reaches without a state
// agent.
type WorkerSpec struct {
	ID        string
	url       string
	events    string // the engine's bound PUB, dialable; "" for approximate mode
	replay    string // its replay ROUTER ("" for none): with events, or an engine sending to --events-bind
	snapshot  string // its SGLang snapshot-v1 ROUTER ("" for none), with events
	blockSize int
	dp        int
	// tp is the tensor-parallel ranks per DP rank. Above 1, each TP rank's
	// runner reports its shard of the rank's runner inventory on a topic of
	// its own (kvevents.RunnerShardTopic) and the shards are folded.
	tp         int
	workerType hints.WorkerType // TypeUnknown: not a hint target
	model      string           // "" asks the worker's /v1/models
	engine     string
	placement  *hints.Placement // hint= override
	// bootstrapPort is an SGLang prefill engine's
	// disaggregation_bootstrap_port (bootstrap_port=, default SGLang's).
	bootstrapPort int
	// control is each DP rank's runner control endpoint (its TP rank 0's):
	// what a hint names to pull from this worker's runner. Empty: the
	// worker is no hint source.
	control []string
}

// Keys of a --worker value.
const (
	wkURL       = "url"
	wkEvents    = "events"
	wkReplay    = "replay"
	wkSnapshot  = "snapshot"
	wkBlockSize = "block_size"
	wkDP        = "dp"
	wkTP        = "tp"
	wkType      = "type"
	wkID        = "id"
	wkModel     = "model"
	wkEngine    = "engine"
	wkHint      = "hint"
	wkBootstrap = "bootstrap_port"
	wkControl   = "control"
)

// ParseWorkerSpec reads url=http://H:P,events=tcp://H:P[,replay=...]
// [,snapshot=...][,block_size=N][,dp=N][,tp=N][,type=T][,id=ID][,model=M]
// [,engine=E][,hint=P][,bootstrap_port=N][,control=tcp://H:P[;tcp://H:P...]].
// type=prefill or decode makes the engine serve one leg of disaggregated
// requests (engine= says which protocol).
func ParseWorkerSpec(s string) (WorkerSpec, error) {
	spec := WorkerSpec{blockSize: DefaultBlockSize, dp: 1, tp: 1, engine: router.EngineVLLM}
	seen := map[string]bool{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || v == "" {
			return WorkerSpec{}, fmt.Errorf("%w %q: %q: want key=value", errWorkerFlag, s, kv)
		}
		if seen[k] {
			return WorkerSpec{}, fmt.Errorf("%w %q: %s given twice", errWorkerFlag, s, k)
		}
		seen[k] = true
		var err error
		switch k {
		case wkURL:
			spec.url = strings.TrimRight(v, "/")
		case wkEvents:
			spec.events = v
		case wkReplay:
			spec.replay = v
		case wkSnapshot:
			spec.snapshot = v
		case wkBlockSize:
			spec.blockSize, err = positive(v)
		case wkDP:
			spec.dp, err = positive(v)
		case wkTP:
			spec.tp, err = positive(v)
		case wkType:
			spec.workerType, err = hints.ParseWorkerType(v)
		case wkID:
			spec.ID = v
		case wkModel:
			spec.model = v
		case wkEngine:
			if v != router.EngineVLLM && v != router.EngineSGLang {
				err = fmt.Errorf("want %s or %s", router.EngineSGLang, router.EngineVLLM)
			}
			spec.engine = v
		case wkHint:
			var p hints.Placement
			p, err = parsePlacement(v)
			spec.placement = &p
		case wkBootstrap:
			if spec.bootstrapPort, err = positive(v); err == nil && spec.bootstrapPort > 65535 {
				err = fmt.Errorf("%q: want a port in 1..65535", v)
			}
		case wkControl:
			for ep := range strings.SplitSeq(v, ";") {
				if err = checkControl(ep); err != nil {
					break
				}
				spec.control = append(spec.control, ep)
			}
		default:
			err = fmt.Errorf("unknown key; known: url, events, replay, snapshot, block_size, dp, tp, type, id, model, engine, hint, bootstrap_port, control")
		}
		if err != nil {
			return WorkerSpec{}, fmt.Errorf("%w %q: %s: %v", errWorkerFlag, s, k, err)
		}
	}
	u, err := url.Parse(spec.url)
	if spec.url == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return WorkerSpec{}, fmt.Errorf("%w %q: url: want http://HOST:PORT of the engine's OpenAI server", errWorkerFlag, s)
	}
	if spec.ID == "" {
		spec.ID = u.Host
	}
	for k, ep := range map[string]string{wkEvents: spec.events, wkReplay: spec.replay, wkSnapshot: spec.snapshot} {
		if ep != "" && kvstream.Binds(ep) && strings.HasPrefix(ep, "tcp://") {
			return WorkerSpec{}, fmt.Errorf("%w %q: %s=%s: the engine binds there; give the address the router dials (tcp://ENGINE_HOST:PORT)",
				errWorkerFlag, s, k, ep)
		}
	}
	if spec.snapshot != "" && (spec.events == "" || spec.engine != router.EngineSGLang) {
		return WorkerSpec{}, fmt.Errorf("%w %q: snapshot (SGLang's snapshot_endpoint) needs events and engine=sglang", errWorkerFlag, s)
	}
	if spec.bootstrapPort != 0 && (spec.engine != router.EngineSGLang || spec.workerType != hints.TypePrefill) {
		return WorkerSpec{}, fmt.Errorf("%w %q: bootstrap_port: only an SGLang prefill engine (engine=sglang,type=prefill) runs a bootstrap server",
			errWorkerFlag, s)
	}
	if spec.engine == router.EngineSGLang && spec.workerType == hints.TypePrefill && spec.bootstrapPort == 0 {
		spec.bootstrapPort = workerconfig.DefaultSGLangBootstrapPort
	}
	if err := spec.perRankControl(); err != nil {
		return WorkerSpec{}, fmt.Errorf("%w %q: control: %v", errWorkerFlag, s, err)
	}
	if spec.tp > 1 && spec.engine != router.EngineSGLang {
		// vLLM's runner connector reports through the engine core's
		// scheduler, which speaks for all its TP workers: one inventory,
		// on the plain topic, that per-shard folding would drop.
		return WorkerSpec{}, fmt.Errorf("%w %q: tp=%d: engine=%s reports one runner inventory for all its TP ranks; leave tp= out (tp>1 is for engine=sglang, whose runners report per TP rank)",
			errWorkerFlag, s, spec.tp, spec.engine)
	}
	return spec, nil
}

// checkControl accepts a dialable runner endpoint, tcp://HOST:PORT.
func checkControl(ep string) error {
	u, err := url.Parse(ep)
	if err != nil || u.Scheme != "tcp" || u.Hostname() == "" || u.Port() == "" || u.Path != "" {
		return fmt.Errorf("%q: want tcp://HOST:PORT of the runner's control endpoint", ep)
	}
	if h := u.Hostname(); h == "*" || h == "0.0.0.0" || h == "::" {
		return fmt.Errorf("%q: a wildcard is where the runner binds; give the address peers dial", ep)
	}
	if _, err := positive(u.Port()); err != nil {
		return fmt.Errorf("%q: port %v", ep, err)
	}
	return nil
}

// perRankControl gives every DP rank its control endpoint: one per rank as
// given, or one for rank 0 from which the others follow by the attention
// rank port rule both engines' runners bind by (DP rank d's TP rank 0 at
// port + d·TP).
func (s *WorkerSpec) perRankControl() error {
	switch {
	case len(s.control) == 0:
		return nil
	case s.workerType == hints.TypeUnknown:
		return fmt.Errorf("a hint source needs type= (aggregated, prefill or decode): only workers of the target's type are sources")
	case len(s.control) == s.dp:
		return nil
	case len(s.control) != 1:
		return fmt.Errorf("%d endpoints for dp=%d: give one per DP rank, or rank 0's alone", len(s.control), s.dp)
	}
	u, _ := url.Parse(s.control[0])
	port, _ := strconv.Atoi(u.Port())
	for d := 1; d < s.dp; d++ {
		p := port + d*s.tp
		if p > 65535 {
			return fmt.Errorf("DP rank %d's port %d (%s + %d·tp) is out of range; give one endpoint per rank", d, p, s.control[0], d)
		}
		s.control = append(s.control, "tcp://"+net.JoinHostPort(u.Hostname(), strconv.Itoa(p)))
	}
	return nil
}

// runnerTargets lists every TP rank's runner of every DP rank: control=
// names each rank's TP rank 0, and TP rank t of a rank binds that port + t
// (the attention rank port rule perRankControl follows too).
func (s WorkerSpec) runnerTargets() []runnerprobe.Target {
	var out []runnerprobe.Target
	for d, ep := range s.control {
		u, _ := url.Parse(ep) // checked by checkControl
		port, _ := strconv.Atoi(u.Port())
		for t := range max(s.tp, 1) {
			out = append(out, runnerprobe.Target{DP: d, TP: t, Endpoint: "tcp://" + net.JoinHostPort(u.Hostname(), strconv.Itoa(port+t))})
		}
	}
	return out
}

// CheckSpecs checks what one --worker cannot tell alone: replay= without
// events= needs --events-bind, where such an engine's events arrive.
func CheckSpecs(specs []WorkerSpec, eventsBind string) error {
	for _, s := range specs {
		if s.replay == "" || s.events != "" {
			continue
		}
		if eventsBind == "" {
			return fmt.Errorf("%w %s: replay=%s needs the engine's events: give events= (an engine that binds) or --events-bind (engines that connect)",
				errWorkerFlag, s.ID, s.replay)
		}
		if s.dp > 1 {
			// The ranks' publishers share the worker's topic on
			// --events-bind, so a gap cannot name the rank to ask.
			return fmt.Errorf("%w %s: replay= with --events-bind needs dp=1 (dp=%d): give events= to follow each rank's publisher",
				errWorkerFlag, s.ID, s.dp)
		}
	}
	return nil
}

// parsePlacement accepts the configuration names and "-old" for "-legacy".
func parsePlacement(v string) (hints.Placement, error) {
	return hints.ParsePlacement(strings.Replace(v, "-old", "-legacy", 1))
}

func positive(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q: want a positive integer", v)
	}
	return n, nil
}

// hostPort is the worker's URL host:port, how --events-bind topics name it.
func (s WorkerSpec) hostPort() string {
	u, err := url.Parse(s.url)
	if err != nil {
		return ""
	}
	if u.Port() == "" {
		if u.Scheme == "https" {
			return u.Host + ":443"
		}
		return u.Host + ":80"
	}
	return u.Host
}

// worker builds the router's view of the spec once its model is known.
// events says whether the worker's events reach the router (events= or
// seen on --events-bind).
func (s WorkerSpec) worker(model string, events bool) router.Worker {
	w := router.Worker{
		ID: s.ID, Model: model, URL: s.url, Engine: s.engine, BlockSize: s.blockSize,
		DPSize: s.dp, Mode: router.ModeApproximate, Origin: router.OriginFlag,
	}
	w.Placement, _ = router.PlacementFor(s.engine)
	if s.placement != nil {
		w.Placement = *s.placement
	}
	if s.workerType != hints.TypeUnknown {
		// The operator vouches that the engine reads hints, and with
		// control= that its runners serve peers there.
		w.Capability = hints.Capability{CanConsume: true, Type: s.workerType}
		if len(s.control) > 0 {
			w.Capability.Endpoints = make(map[int]string, len(s.control))
			for r, ep := range s.control {
				w.Capability.Endpoints[r] = ep
			}
		}
	}
	w.Role, w.BootstrapPort = s.workerType, s.bootstrapPort
	if events {
		w.Mode = router.ModeEvents
		// Runner-owned blocks an engine reports need an owner to belong
		// to; without an agent, each rank's runner is its own.
		w.Owners = make(map[int]string, s.dp)
		for r := range s.dp {
			w.Owners[r] = flagOwner(s.ID, r)
		}
	}
	return w
}

// flagOwner names the cache owner of a --worker rank's runner.
func flagOwner(id string, rank int) string { return id + "#runner" + strconv.Itoa(rank) }
