// This file holds Descriptor, what the state agent works from, Build, and its validation.

package workerconfig

import (
	"encoding/json"
	"fmt"
	"strconv"

	"kvrouter/internal/kvevents"
)

// Engine is the inference engine a worker runs.
type Engine string

// WorkerType is a worker's role; hints pair only workers of the same role.
type WorkerType string

// RunnerMode is how the worker's KV cache runner is attached, if at all.
type RunnerMode string

// Descriptor is what the state agent needs to know about one worker: how to
// subscribe to its KV events, what to register, and whether it may take part
// in hints. Build one with FromSGLang, FromVLLM or Build; a descriptor from
// them always passes Validate.
type Descriptor struct {
	Engine     Engine     `json:"engine"`
	Model      string     `json:"model"`
	WorkerType WorkerType `json:"worker_type"`
	// BootstrapPort is an SGLang prefill worker's bootstrap server port
	// (disaggregation_bootstrap_port); 0 for other workers.
	BootstrapPort int        `json:"bootstrap_port,omitempty"`
	RunnerMode    RunnerMode `json:"runner_mode"`
	KVBlockSize   int        `json:"kv_block_size"`
	TPSize        int        `json:"tp_size"`

	// The worker serves global DP ranks DPStart .. DPStart+DPSize-1.
	DPStart int   `json:"dp_start"`
	DPSize  int   `json:"dp_size"`
	DPRanks []int `json:"dp_ranks"`

	// Events has one entry per DP rank in DPRanks order, or none when the
	// engine publishes no KV events.
	Events []EventEndpoint `json:"event_endpoints"`

	// ControlPortStride is how many control ports one DP rank's runners
	// occupy (SGLang's tp_size // dp_size under attention DP, else 1).
	ControlPortStride int `json:"control_port_stride"`
	// TPRanksPerDPRank is the number of runner control endpoints per DP rank
	// (SourceControl[i].TPEndpoints); InventoryAggregation says how the agent
	// folds their inventories into the DP rank's.
	TPRanksPerDPRank     int    `json:"tp_ranks_per_dp_rank"`
	InventoryAggregation string `json:"inventory_aggregation"`
	// SourceControl has one entry per DP rank when HintCapable, else none.
	SourceControl []SourceControl `json:"source_control"`

	// Cache owners of runner-owned inventory, keyed by global DP rank. Each
	// owner's events reach routers on a subject of its own
	// (relay.SourceSubject), so unique owners are what keep their streams
	// apart.
	OwnerIDs map[int]string `json:"owner_ids"`

	// HintForwarding: the runner accepts hints from requests (SGLang
	// enable_remote_hint; vLLM router_hint in the tier's router_capabilities).
	HintForwarding bool `json:"hint_forwarding"`
	// ProcessLocalInventory: each runner reports only blocks it holds itself
	// (SGLang linker publish_inventory true, kvcr_service_socket_path null).
	ProcessLocalInventory bool `json:"process_local_inventory"`

	// RuntimeData is the registration runtime data, in publication order:
	// endpoints, worker type, capability flag last (docs/wire.md §5.1). Empty unless
	// HintCapable: a refused worker is never half-registered.
	RuntimeData []RuntimeEntry `json:"runtime_data"`

	// SingleHost: built with Options.AllowLoopback, so advertised endpoints
	// may be loopback; Validate accepts them only then.
	SingleHost bool `json:"single_host,omitempty"`

	HintCapable bool   `json:"hint_capable"`
	Refusal     string `json:"refusal"` // why not HintCapable; empty when capable
	// Warnings are facts an operator should know that do not block.
	Warnings []string `json:"warnings,omitempty"`
}

// EventEndpoint is how to reach one DP rank's KV event publisher.
type EventEndpoint struct {
	DPRank int `json:"dp_rank"`
	// Endpoint is the engine's own address for this rank, DP offset applied.
	Endpoint string `json:"endpoint"`
	// PublisherBinds: the engine binds Endpoint and a subscriber connects to
	// Dial. Otherwise the engine connects and the subscriber binds Dial.
	PublisherBinds bool   `json:"publisher_binds"`
	Dial           string `json:"dial"`
	// Replay is the engine's replay ROUTER (always bound); empty when unset.
	ReplayEndpoint string `json:"replay_endpoint,omitempty"`
	ReplayDial     string `json:"replay_dial,omitempty"`
	// Snapshot is SGLang's snapshot-v1 ROUTER (always bound); empty when
	// unset.
	SnapshotEndpoint string `json:"snapshot_endpoint,omitempty"`
	SnapshotDial     string `json:"snapshot_dial,omitempty"`
	// Topic is the engine's topic; SUB filtering is by prefix.
	Topic string `json:"topic"`
}

// SourceControl is one DP rank's runner control endpoints.
type SourceControl struct {
	DPRank int `json:"dp_rank"`
	// Endpoint is advertised to the router: the first TP rank's runner.
	Endpoint string `json:"endpoint"`
	// TPEndpoints lists every TP rank's runner of this DP rank, in TP order.
	TPEndpoints []string `json:"tp_endpoints"`
}

// RuntimeEntry is one registration runtime-data key with its JSON value.
type RuntimeEntry struct {
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value"`
}

// CanonicalRuntimeKey maps an older registration runtime-data key to its
// current name, so a reader accepts both shapes; other keys pass unchanged.
func CanonicalRuntimeKey(key string) string {
	switch key {
	case LegacyKeyHintCapability:
		return KeyHintCapability
	case LegacyKeyWorkerType:
		return KeyWorkerType
	case LegacyKeySourceControlEndpoints:
		return KeySourceControlEndpoints
	}
	return key
}

// ParseEngine maps an engine name to an Engine.
func ParseEngine(s string) (Engine, error) {
	switch e := Engine(s); e {
	case EngineSGLang, EngineVLLM:
		return e, nil
	}
	return "", fmt.Errorf("%w: engine %q: want %s or %s", ErrInvalidConfig, s, EngineSGLang, EngineVLLM)
}

// Build reads an engine's configuration (SGLang server arguments or vLLM
// engine arguments, as JSON) into a descriptor.
func Build(engine Engine, config []byte, opt Options) (*Descriptor, error) {
	switch engine {
	case EngineSGLang:
		return FromSGLang(config, opt)
	case EngineVLLM:
		return FromVLLM(config, opt)
	}
	_, err := ParseEngine(string(engine))
	return nil, err
}

// CheckEventBlockSize rejects a stored event whose block size differs from
// the worker's KV block size: the router derives block identity from
// token_ids split at the advertised size, so a mismatch would index wrong
// blocks. Placeholders (no tokens) carry no usable size and pass.
func (d *Descriptor) CheckEventBlockSize(ev *kvevents.Event) error {
	if ev.Kind != kvevents.KindStored || ev.Placeholder || ev.BlockSize == d.KVBlockSize {
		return nil
	}
	return fmt.Errorf("%w: event block_size %d, worker kv_block_size %d", ErrBlockSizeMismatch, ev.BlockSize, d.KVBlockSize)
}

// Validate checks the descriptor's invariants (docs/wire.md §5.6):
// ranks exactly the DP range, one event source per rank, and for a
// hint-capable worker hint forwarding, inventory guarantees, dialable
// endpoints, unique owners, and runtime data that
// agrees with all of it.
func (d *Descriptor) Validate() error {
	switch d.Engine {
	case EngineSGLang, EngineVLLM:
	default:
		return descriptorErr("engine %q", d.Engine)
	}
	switch d.WorkerType {
	case WorkerAggregated, WorkerPrefill, WorkerDecode:
	default:
		return descriptorErr("worker_type %q", d.WorkerType)
	}
	if sglPrefill := d.Engine == EngineSGLang && d.WorkerType == WorkerPrefill; sglPrefill != (d.BootstrapPort != 0) ||
		d.BootstrapPort < 0 || d.BootstrapPort > 65535 {
		return descriptorErr("bootstrap_port %d: an SGLang prefill worker has one in 1..65535, no other worker any", d.BootstrapPort)
	}
	switch d.RunnerMode {
	case RunnerNone, RunnerLinker, RunnerHiCache, RunnerSecondaryTier:
	default:
		return descriptorErr("runner_mode %q", d.RunnerMode)
	}
	if d.KVBlockSize < 1 || d.TPSize < 1 || d.DPSize < 1 || d.DPStart < 0 {
		return descriptorErr("kv_block_size %d, tp_size %d, dp_size %d, dp_start %d must be positive",
			d.KVBlockSize, d.TPSize, d.DPSize, d.DPStart)
	}
	if err := d.checkRanks("dp_ranks", d.DPRanks); err != nil {
		return err
	}
	if len(d.Events) > 0 {
		ranks := make([]int, len(d.Events))
		for i, e := range d.Events {
			ranks[i] = e.DPRank
			if e.Endpoint == "" || e.Dial == "" {
				return descriptorErr("event endpoint of DP rank %d is empty", e.DPRank)
			}
		}
		if err := d.checkRanks("event_endpoints", ranks); err != nil {
			return err
		}
	}
	if !d.HintCapable {
		if d.Refusal == "" {
			return descriptorErr("not hint capable but no refusal reason")
		}
		if len(d.RuntimeData) > 0 || len(d.SourceControl) > 0 || len(d.OwnerIDs) > 0 {
			return descriptorErr("not hint capable but carries hint runtime data, endpoints or owners")
		}
		return nil
	}
	return d.validateHints()
}

func (d *Descriptor) validateHints() error {
	switch {
	case d.Refusal != "":
		return descriptorErr("hint capable with a refusal reason %q", d.Refusal)
	case d.RunnerMode == RunnerNone:
		return descriptorErr("hint capable without a runner")
	case !d.HintForwarding:
		return descriptorErr("hint capable but hint forwarding is off")
	case d.RunnerMode == RunnerLinker && !d.ProcessLocalInventory:
		return descriptorErr("linker inventory is not process-local")
	case len(d.Events) == 0:
		return descriptorErr("hint capable without KV events")
	case d.TPRanksPerDPRank < 1:
		return descriptorErr("tp_ranks_per_dp_rank %d", d.TPRanksPerDPRank)
	}
	switch d.InventoryAggregation {
	case AggregateAllTPRanks, AggregateEngine:
	default:
		return descriptorErr("inventory_aggregation %q", d.InventoryAggregation)
	}
	ranks := make([]int, len(d.SourceControl))
	ports := make(map[string]int)
	for i, s := range d.SourceControl {
		ranks[i] = s.DPRank
		if len(s.TPEndpoints) != d.TPRanksPerDPRank || s.TPEndpoints[0] != s.Endpoint {
			return descriptorErr("DP rank %d: %d TP endpoints starting %v, want %d starting %q",
				s.DPRank, len(s.TPEndpoints), s.TPEndpoints, d.TPRanksPerDPRank, s.Endpoint)
		}
		for _, ep := range s.TPEndpoints {
			if err := checkAdvertised(ep, d.SingleHost); err != nil {
				return descriptorErr("DP rank %d: %v", s.DPRank, err)
			}
			if other, dup := ports[ep]; dup {
				return descriptorErr("DP ranks %d and %d share control endpoint %s", other, s.DPRank, ep)
			}
			ports[ep] = s.DPRank
		}
	}
	if err := d.checkRanks("source_control", ranks); err != nil {
		return err
	}
	if err := d.validateOwners(); err != nil {
		return err
	}
	return d.validateRuntimeData()
}

func (d *Descriptor) validateOwners() error {
	if len(d.OwnerIDs) != d.DPSize {
		return descriptorErr("%d owner ids for %d DP ranks", len(d.OwnerIDs), d.DPSize)
	}
	seen := make(map[string]int, d.DPSize)
	for _, r := range d.DPRanks {
		id, ok := d.OwnerIDs[r]
		if !ok {
			return descriptorErr("no owner id for DP rank %d", r)
		}
		if !ValidOwnerID(id) {
			return descriptorErr("owner id %q of DP rank %d is not semantics:scope/dc/slot lowercase hex", id, r)
		}
		if other, dup := seen[id]; dup {
			return descriptorErr("DP ranks %d and %d share owner id %s", other, r, id)
		}
		seen[id] = r
	}
	return nil
}

func (d *Descriptor) validateRuntimeData() error {
	if len(d.RuntimeData) != 3 ||
		d.RuntimeData[0].Key != KeySourceControlEndpoints ||
		d.RuntimeData[1].Key != KeyWorkerType ||
		d.RuntimeData[2].Key != KeyHintCapability {
		return descriptorErr("runtime data must be exactly %s, %s, %s in that order",
			KeySourceControlEndpoints, KeyWorkerType, KeyHintCapability)
	}
	var endpoints map[string]string
	if err := json.Unmarshal(d.RuntimeData[0].Value, &endpoints); err != nil {
		return descriptorErr("%s: %v", KeySourceControlEndpoints, err)
	}
	if len(endpoints) != len(d.SourceControl) {
		return descriptorErr("%s has %d ranks, want %d", KeySourceControlEndpoints, len(endpoints), len(d.SourceControl))
	}
	for _, s := range d.SourceControl {
		if endpoints[strconv.Itoa(s.DPRank)] != s.Endpoint {
			return descriptorErr("%s[%d] = %q, want %q", KeySourceControlEndpoints, s.DPRank, endpoints[strconv.Itoa(s.DPRank)], s.Endpoint)
		}
	}
	var wt string
	if err := json.Unmarshal(d.RuntimeData[1].Value, &wt); err != nil || WorkerType(wt) != d.WorkerType {
		return descriptorErr("%s = %s, want %q", KeyWorkerType, d.RuntimeData[1].Value, d.WorkerType)
	}
	var flag bool
	if err := json.Unmarshal(d.RuntimeData[2].Value, &flag); err != nil || !flag {
		return descriptorErr("%s = %s, want true", KeyHintCapability, d.RuntimeData[2].Value)
	}
	return nil
}

// checkRanks requires ranks to be exactly DPStart, DPStart+1, ... in order.
func (d *Descriptor) checkRanks(field string, ranks []int) error {
	if len(ranks) != d.DPSize {
		return descriptorErr("%s has %d ranks, the DP range %d..%d has %d", field, len(ranks), d.DPStart, d.DPStart+d.DPSize-1, d.DPSize)
	}
	for i, r := range ranks {
		if r != d.DPStart+i {
			return descriptorErr("%s[%d] is DP rank %d, want %d (ranks must be exactly the DP range, in order)", field, i, r, d.DPStart+i)
		}
	}
	return nil
}

// checkAdvertised re-checks an advertised tcp endpoint without a resolver.
func checkAdvertised(ep string, allowLoopback bool) error {
	e, err := parseZMQ(ep, "endpoint")
	if err != nil {
		return err
	}
	if e.scheme != schemeTCP {
		return fmt.Errorf("%s is not tcp://", ep)
	}
	if _, problem := checkHost(bracket(e.host), allowLoopback); problem != "" {
		return fmt.Errorf("%s: host %s", ep, problem)
	}
	return nil
}
