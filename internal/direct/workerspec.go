// This file holds the --worker flag: its parsing and the worker it describes.

package direct

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"kvrouter/internal/hints"
	"kvrouter/internal/kvstream"
	"kvrouter/internal/router"
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
)

// ParseWorkerSpec reads url=http://H:P,events=tcp://H:P[,replay=...]
// [,snapshot=...][,block_size=N][,dp=N][,tp=N][,type=T][,id=ID][,model=M]
// [,engine=E][,hint=P].
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
		default:
			err = fmt.Errorf("unknown key; known: url, events, replay, snapshot, block_size, dp, tp, type, id, model, engine, hint")
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
	if spec.tp > 1 && spec.engine != router.EngineSGLang {
		// vLLM's runner connector reports through the engine core's
		// scheduler, which speaks for all its TP workers: one inventory,
		// on the plain topic, that per-shard folding would drop.
		return WorkerSpec{}, fmt.Errorf("%w %q: tp=%d: engine=%s reports one runner inventory for all its TP ranks; leave tp= out (tp>1 is for engine=sglang, whose runners report per TP rank)",
			errWorkerFlag, s, spec.tp, spec.engine)
	}
	return spec, nil
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
		// The operator vouches that the engine reads hints.
		w.Capability = hints.Capability{CanConsume: true, Type: s.workerType}
	}
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
