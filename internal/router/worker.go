// Package router is the routing decision core: the table of workers and the
// data-parallel ranks they serve, the inventory view with each source's
// readiness, the candidates a request could go to and their cost, and the
// hint the chosen target gets. The router service that runs it, `kvrouter
// serve`, is package serve.
//
// It is pure: no sockets, clocks or goroutines of its own. The service's
// packages feed it registrations, events and the time; it answers
// decisions. Everything is safe for concurrent use.
package router

import (
	"errors"
	"fmt"

	"kvrouter/internal/hints"
)

// Sentinel errors callers branch on.
var (
	// ErrUnknownModel: no worker serves the request's model.
	ErrUnknownModel = errors.New("router: model not served")
	// ErrNoWorker: the model is served but no rank is left to choose
	// (every worker excluded, or the forced target does not serve it).
	ErrNoWorker = errors.New("router: no worker available")
	// ErrBadWorker: a worker description cannot be used.
	ErrBadWorker = errors.New("router: bad worker")
)

// Mode is how the router learns what a worker's caches hold.
type Mode uint8

const (
	// ModeEvents: from the engine's KV events, directly or through the
	// worker's state agent.
	ModeEvents Mode = iota
	// ModeApproximate: from the router's own routing decisions, forgotten
	// after a TTL. A guess is good enough to steer load but never to name a
	// peer in a hint.
	ModeApproximate
)

func (m Mode) String() string {
	if m == ModeApproximate {
		return "approximate"
	}
	return "events"
}

// Origin is where a worker's description came from.
type Origin uint8

const (
	// OriginFlag: given on the command line; its events, if any, come
	// straight from the engine.
	OriginFlag Origin = iota
	// OriginDiscovery: registered by a state agent, whose relay carries
	// the events. Trusted only while the discovery watch is live.
	OriginDiscovery
)

func (o Origin) String() string {
	if o == OriginDiscovery {
		return "discovery"
	}
	return "flag"
}

// Engine names, as registered and as given in --worker.
const (
	EngineVLLM   = "vllm"
	EngineSGLang = "sglang"
)

// Worker is one engine front with its data-parallel ranks.
type Worker struct {
	ID        string
	Model     string
	URL       string
	Engine    string // EngineVLLM or EngineSGLang
	BlockSize int
	// Global DP ranks DPStart .. DPStart+DPSize-1 are routing targets.
	DPStart, DPSize int
	Mode            Mode
	Origin          Origin
	// Capability is what the worker advertised about hints; zero when it
	// advertised nothing or was refused.
	Capability hints.Capability
	// Placement is where the worker's engine reads a hint.
	Placement hints.Placement
	// Owners maps a global DP rank to the cache owner whose runner-owned
	// blocks that rank's runner holds.
	Owners map[int]string
	// Refusal says why the worker takes part in routing without hints.
	Refusal string
	// Role is the worker's part in disaggregated serving: TypePrefill or
	// TypeDecode, else (TypeAggregated, TypeUnknown) it serves whole
	// requests. A model with a prefill and a decode worker is served
	// disaggregated (see Plan).
	Role hints.WorkerType
	// BootstrapPort is an SGLang prefill worker's bootstrap server
	// (disaggregation_bootstrap_port), which the decode worker asks where
	// the request's KV is; 0 for SGLang's default.
	BootstrapPort int
	// LoRAs are the LoRA adapters the engine serves besides Model, by the
	// names requests give them (vLLM lists them in /v1/models with Model
	// as their parent).
	LoRAs []string
}

// Validate checks what routing needs.
func (w *Worker) Validate() error {
	switch {
	case w.ID == "":
		return fmt.Errorf("%w: empty id", ErrBadWorker)
	case w.Model == "":
		return fmt.Errorf("%w: %s: empty model", ErrBadWorker, w.ID)
	case w.URL == "":
		return fmt.Errorf("%w: %s: empty url", ErrBadWorker, w.ID)
	case w.BlockSize <= 0:
		return fmt.Errorf("%w: %s: block_size %d must be positive", ErrBadWorker, w.ID, w.BlockSize)
	case w.DPSize <= 0 || w.DPStart < 0:
		return fmt.Errorf("%w: %s: dp range start %d size %d", ErrBadWorker, w.ID, w.DPStart, w.DPSize)
	case w.Engine != EngineVLLM && w.Engine != EngineSGLang:
		return fmt.Errorf("%w: %s: engine %q: want %q or %q", ErrBadWorker, w.ID, w.Engine, EngineVLLM, EngineSGLang)
	case w.BootstrapPort < 0 || w.BootstrapPort > 65535:
		return fmt.Errorf("%w: %s: bootstrap port %d outside 0..65535", ErrBadWorker, w.ID, w.BootstrapPort)
	}
	return nil
}

// HasRank reports whether rank is one of the worker's global DP ranks.
func (w *Worker) HasRank(rank int) bool { return rank >= w.DPStart && rank < w.DPStart+w.DPSize }

// PlacementFor is where an engine reads hints by default.
func PlacementFor(engine string) (hints.Placement, error) {
	switch engine {
	case EngineSGLang:
		return hints.PlaceSGLang, nil
	case EngineVLLM, "":
		return hints.PlaceVLLM, nil
	}
	return 0, fmt.Errorf("%w: engine %q: want %q or %q", ErrBadWorker, engine, EngineVLLM, EngineSGLang)
}
