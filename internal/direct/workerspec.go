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
	URL       string
	Events    string // the engine's bound PUB, dialable; "" for approximate mode
	Replay    string // its replay ROUTER; "" for none
	BlockSize int
	DP        int
	// TP is the tensor-parallel ranks per DP rank. Above 1, each TP rank's
	// runner reports its shard of the rank's runner inventory on a topic of
	// its own (kvevents.RunnerShardTopic) and the shards are folded.
	TP        int
	Type      hints.WorkerType // TypeUnknown: not a hint target
	Model     string           // "" asks the worker's /v1/models
	Engine    string
	Placement *hints.Placement // hint= override
}

// Keys of a --worker value.
const (
	wkURL       = "url"
	wkEvents    = "events"
	wkReplay    = "replay"
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
// [,block_size=N][,dp=N][,tp=N][,type=T][,id=ID][,model=M][,engine=E][,hint=P].
func ParseWorkerSpec(s string) (WorkerSpec, error) {
	spec := WorkerSpec{BlockSize: DefaultBlockSize, DP: 1, TP: 1, Engine: router.EngineVLLM}
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
			spec.URL = strings.TrimRight(v, "/")
		case wkEvents:
			spec.Events = v
		case wkReplay:
			spec.Replay = v
		case wkBlockSize:
			spec.BlockSize, err = positive(v)
		case wkDP:
			spec.DP, err = positive(v)
		case wkTP:
			spec.TP, err = positive(v)
		case wkType:
			spec.Type, err = hints.ParseWorkerType(v)
		case wkID:
			spec.ID = v
		case wkModel:
			spec.Model = v
		case wkEngine:
			if v != router.EngineVLLM && v != router.EngineSGLang {
				err = fmt.Errorf("want %s or %s", router.EngineSGLang, router.EngineVLLM)
			}
			spec.Engine = v
		case wkHint:
			var p hints.Placement
			p, err = parsePlacement(v)
			spec.Placement = &p
		default:
			err = fmt.Errorf("unknown key; known: url, events, replay, block_size, dp, tp, type, id, model, engine, hint")
		}
		if err != nil {
			return WorkerSpec{}, fmt.Errorf("%w %q: %s: %v", errWorkerFlag, s, k, err)
		}
	}
	u, err := url.Parse(spec.URL)
	if spec.URL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return WorkerSpec{}, fmt.Errorf("%w %q: url: want http://HOST:PORT of the engine's OpenAI server", errWorkerFlag, s)
	}
	if spec.ID == "" {
		spec.ID = u.Host
	}
	for k, ep := range map[string]string{wkEvents: spec.Events, wkReplay: spec.Replay} {
		if ep != "" && kvstream.Binds(ep) && strings.HasPrefix(ep, "tcp://") {
			return WorkerSpec{}, fmt.Errorf("%w %q: %s=%s: the engine binds there; give the address the router dials (tcp://ENGINE_HOST:PORT)",
				errWorkerFlag, s, k, ep)
		}
	}
	if spec.TP > 1 && spec.Engine != router.EngineSGLang {
		// vLLM's runner connector reports through the engine core's
		// scheduler, which speaks for all its TP workers: one inventory,
		// on the plain topic, that per-shard folding would drop.
		return WorkerSpec{}, fmt.Errorf("%w %q: tp=%d: engine=%s reports one runner inventory for all its TP ranks; leave tp= out (tp>1 is for engine=sglang, whose runners report per TP rank)",
			errWorkerFlag, s, spec.TP, spec.Engine)
	}
	return spec, nil
}

// CheckSpecs checks what one --worker cannot tell alone: replay= without
// events= needs --events-bind, where such an engine's events arrive.
func CheckSpecs(specs []WorkerSpec, eventsBind string) error {
	for _, s := range specs {
		if s.Replay == "" || s.Events != "" {
			continue
		}
		if eventsBind == "" {
			return fmt.Errorf("%w %s: replay=%s needs the engine's events: give events= (an engine that binds) or --events-bind (engines that connect)",
				errWorkerFlag, s.ID, s.Replay)
		}
		if s.DP > 1 {
			// The ranks' publishers share the worker's topic on
			// --events-bind, so a gap cannot name the rank to ask.
			return fmt.Errorf("%w %s: replay= with --events-bind needs dp=1 (dp=%d): give events= to follow each rank's publisher",
				errWorkerFlag, s.ID, s.DP)
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
	u, err := url.Parse(s.URL)
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
		ID: s.ID, Model: model, URL: s.URL, Engine: s.Engine, BlockSize: s.BlockSize,
		DPSize: s.DP, Mode: router.ModeApproximate, Origin: router.OriginFlag,
	}
	w.Placement, _ = router.PlacementFor(s.Engine)
	if s.Placement != nil {
		w.Placement = *s.Placement
	}
	if s.Type != hints.TypeUnknown {
		// The operator vouches that the engine reads hints.
		w.Capability = hints.Capability{CanConsume: true, Type: s.Type}
	}
	if events {
		w.Mode = router.ModeEvents
		// Runner-owned blocks an engine reports need an owner to belong
		// to; without an agent, each rank's runner is its own.
		w.Owners = make(map[int]string, s.DP)
		for r := range s.DP {
			w.Owners[r] = flagOwner(s.ID, r)
		}
	}
	return w
}

// flagOwner names the cache owner of a --worker rank's runner.
func flagOwner(id string, rank int) string { return id + "#runner" + strconv.Itoa(rank) }
