// This file holds the parts of a descriptor both engines share: events, ports, hints, checks.

package workerconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Options carry what a configuration cannot say about its surroundings.
type Options struct {
	// DPStart overrides the first global DP rank the worker serves. nil takes
	// it from the configuration: vLLM data_parallel_rank or
	// data_parallel_start_rank, SGLang 0.
	DPStart *int
	// AdvertiseHost is the host a subscriber dials for KV event endpoints
	// bound to a wildcard (tcp://*:5557). Empty: the runner's advertised
	// host, else the engine's own host argument when it names one, else
	// 127.0.0.1, because the state agent runs beside its engine.
	AdvertiseHost string
	// ReadFile reads an "@path" extra config; nil refuses "@path".
	ReadFile func(path string) ([]byte, error)
	// Resolve resolves host names for the loopback check; nil checks only
	// literals and localhost names.
	Resolve Resolver
	// AllowLoopback accepts a loopback advertise host (and a loopback
	// control_host bind), for single-host deployments such as the local
	// demo cluster, where every peer runs on this machine and loopback IS
	// dialable by all of them. Wildcard and unspecified hosts stay refused.
	AllowLoopback bool
}

// eventsConfig is a parsed kv_events_config with events enabled.
type eventsConfig struct {
	option   string
	endpoint zmqEndpoint
	raw      string
	binds    bool
	replay   *sideSocket
	snapshot *sideSocket
	topic    string
}

// sideSocket is a ROUTER the engine binds beside its PUB (replay_endpoint,
// SGLang's snapshot_endpoint). The engine offsets it by DP rank like the
// PUB, so each rank's copy takes a port of its own.
type sideSocket struct {
	option   string
	raw      string
	endpoint zmqEndpoint
}

// parseSideSocket reads one side socket; nil when unset. A socket may not
// share its text with an earlier one: for ipc:// the port book cannot see
// the clash, and the engine's second bind would fail.
func parseSideSocket(o object, key string, earlier ...*sideSocket) (*sideSocket, error) {
	s, ok, err := o.str(key)
	if err != nil || !ok || s == "" {
		return nil, err
	}
	side := &sideSocket{option: o.name(key), raw: s}
	if side.endpoint, err = parseZMQ(s, side.option); err != nil {
		return nil, err
	}
	if side.endpoint.scheme == schemeInproc {
		return nil, configErr(ErrUnsupportedOption, side.option, "inproc:// is reachable only inside the engine process; use tcp:// or ipc://")
	}
	for _, e := range earlier {
		if e != nil && e.raw == s {
			return nil, configErr(ErrInvalidPort, side.option, "must differ from %s (%s)", e.option, s)
		}
	}
	return side, nil
}

// at is the socket of one DP rank, booked so a clash with any other port of
// the worker names both options.
func (s *sideSocket) at(off, rank int, ports portBook) (zmqEndpoint, error) {
	e, err := s.endpoint.offset(off, s.option)
	if err != nil {
		return e, err
	}
	return e, ports.add(e, fmt.Sprintf("%s of DP rank %d", s.option, rank))
}

var sglangEventKeys = map[string]bool{
	EventsPublisher: true, EventsEndpoint: true, EventsReplayEndpoint: true, EventsBufferSteps: true,
	EventsHWM: true, EventsMaxQueueSize: true, EventsTopic: true, EventsSnapshot: true,
}

// parseEvents reads kv_events_config; nil means the engine publishes none.
func parseEvents(parent object, engine Engine) (*eventsConfig, error) {
	o, ok, err := parent.nested(SGLangKVEventsConfig)
	if err != nil || !ok {
		return nil, err
	}
	if engine == EngineSGLang {
		// Newer SGLang builds refuse unknown keys at startup; say so before
		// the engine does, and name the key.
		for _, k := range sortedKeys(o.m) {
			if sglangEventKeys[k] {
				continue
			}
			if k == EventsEnable {
				return nil, configErr(ErrUnsupportedOption, o.name(k),
					"SGLang has no such key (it is vLLM's) and newer builds refuse unknown keys; remove it: SGLang publishes whenever %s is given with publisher %q", flagKVEvents, publisherZMQ)
			}
			return nil, configErr(ErrUnsupportedOption, o.name(k), "is not an SGLang kv_events_config key; newer SGLang builds refuse unknown keys, remove it")
		}
	}
	enabled := true
	if engine == EngineVLLM {
		if enabled, err = o.boolean(EventsEnable, false); err != nil {
			return nil, err
		}
	}
	publisher, set, err := o.str(EventsPublisher)
	if err != nil {
		return nil, err
	}
	switch {
	case !set:
		// Both engines default the publisher from whether events are on.
	case publisher == publisherNull:
		enabled = false
	case publisher != publisherZMQ:
		return nil, configErr(ErrUnsupportedOption, o.name(EventsPublisher), "%q is not a publisher; use %q (or %q to disable)", publisher, publisherZMQ, publisherNull)
	}
	for _, k := range []string{EventsBufferSteps, EventsHWM, EventsMaxQueueSize} {
		if v, ok, err := o.integer(k); err != nil {
			return nil, err
		} else if ok && v < 0 {
			return nil, configErr(nil, o.name(k), "must not be negative, got %d", v)
		}
	}
	if !enabled {
		return nil, nil
	}
	ev := &eventsConfig{option: o.name(EventsEndpoint), raw: defaultEventsAddr}
	if s, ok, err := o.str(EventsEndpoint); err != nil {
		return nil, err
	} else if ok {
		ev.raw = s
	}
	if ev.endpoint, err = parseZMQ(ev.raw, ev.option); err != nil {
		return nil, err
	}
	if ev.endpoint.scheme == schemeInproc {
		return nil, configErr(ErrUnsupportedOption, ev.option,
			"inproc:// is reachable only inside the engine process and the state agent subscribes from its own; use tcp:// or ipc://")
	}
	ev.binds = publisherBinds(engine, ev.raw)
	if err := connectTarget(ev, engine); err != nil {
		return nil, err
	}
	pub := &sideSocket{option: ev.option, raw: ev.raw}
	if ev.replay, err = parseSideSocket(o, EventsReplayEndpoint, pub); err != nil {
		return nil, err
	}
	if engine == EngineSGLang {
		if ev.snapshot, err = parseSideSocket(o, EventsSnapshot, pub, ev.replay); err != nil {
			return nil, err
		}
	} else if s, ok, err := o.str(EventsSnapshot); err != nil {
		return nil, err
	} else if ok && s != "" {
		// Not a vLLM key: vLLM binds nothing there, so there is nothing to
		// clash, but a malformed value is still worth reporting.
		if _, err := parseZMQ(s, o.name(EventsSnapshot)); err != nil {
			return nil, err
		}
	}
	if ev.topic, _, err = o.str(EventsTopic); err != nil {
		return nil, err
	}
	return ev, nil
}

// buildEvents fills d.Events. offsetByGlobal selects which rank the engine
// offsets its ports by: vLLM's engine core uses its global data_parallel_rank,
// SGLang its engine-local (attention) DP rank.
func buildEvents(d *Descriptor, ev *eventsConfig, dialHost string, offsetByGlobal bool, ports portBook) error {
	for i, rank := range d.DPRanks {
		off := i
		if offsetByGlobal {
			off = rank
		}
		pub, err := ev.endpoint.offset(off, ev.option)
		if err != nil {
			return err
		}
		e := EventEndpoint{DPRank: rank, Endpoint: pub.String(), PublisherBinds: ev.binds, Topic: ev.topic}
		e.Dial = pub.String()
		if e.PublisherBinds {
			e.Dial = pub.dialable(dialHost).String()
			if err := ports.add(pub, fmt.Sprintf("%s of DP rank %d", ev.option, rank)); err != nil {
				return err
			}
		}
		if ev.replay != nil {
			rep, err := ev.replay.at(off, rank, ports)
			if err != nil {
				return err
			}
			e.ReplayEndpoint, e.ReplayDial = rep.String(), rep.dialable(dialHost).String()
		}
		if ev.snapshot != nil {
			snap, err := ev.snapshot.at(off, rank, ports)
			if err != nil {
				return err
			}
			e.SnapshotEndpoint, e.SnapshotDial = snap.String(), snap.dialable(dialHost).String()
		}
		d.Events = append(d.Events, e)
	}
	return nil
}

// portBook finds two things of one worker bound to the same TCP port: the
// second bind would fail at startup, or worse, a peer would reach the wrong
// rank.
type portBook map[int]string

func (b portBook) add(e zmqEndpoint, what string) error {
	if e.scheme != schemeTCP {
		return nil
	}
	return b.addPort(e.port, what)
}

func (b portBook) addPort(port int, what string) error {
	if prev, dup := b[port]; dup {
		return configErr(ErrInvalidPort, what, "port %d is also used by %s; give each its own port", port, prev)
	}
	b[port] = what
	return nil
}

// addEvents fills d.Events when the engine publishes any.
func addEvents(d *Descriptor, ev *eventsConfig, opt Options, runnerHost, engineHost string, offsetByGlobal bool, ports portBook) error {
	if ev == nil {
		return nil
	}
	host, err := dialHost(opt, runnerHost, engineHost)
	if err != nil {
		return err
	}
	return buildEvents(d, ev, host, offsetByGlobal, ports)
}

// dialHost picks the host a subscriber dials for wildcard-bound events.
func dialHost(opt Options, runnerHost string, engineHost string) (string, error) {
	if opt.AdvertiseHost != "" {
		h, problem := hostProblem(opt.AdvertiseHost)
		if problem != "" && !strings.Contains(problem, "loopback") {
			return "", configErr(ErrUndialableHost, "--advertise-host", "%s; give the host subscribers reach this worker at", problem)
		}
		if problem != "" {
			// Loopback is a fine event host when subscribers are local.
			h = bracket(strings.Trim(opt.AdvertiseHost, "[]"))
		}
		return h, nil
	}
	if runnerHost != "" {
		return runnerHost, nil
	}
	if h, problem := hostProblem(engineHost); problem == "" {
		return h, nil
	}
	return defaultDialHost, nil
}

// completeHints fills the hint fields of a capable descriptor from the
// advertised host and each DP rank's runner ports (first = advertised).
func completeHints(d *Descriptor, host string, rankPorts [][]int, owners map[int]string) {
	d.HintCapable, d.Refusal = true, ""
	derive := owners == nil
	if derive {
		owners = make(map[int]string, len(d.DPRanks))
	}
	d.OwnerIDs = owners
	var endpoints bytes.Buffer
	endpoints.WriteByte('{')
	for i, rank := range d.DPRanks {
		sc := SourceControl{DPRank: rank}
		for _, p := range rankPorts[i] {
			sc.TPEndpoints = append(sc.TPEndpoints, schemeTCP+host+":"+strconv.Itoa(p))
		}
		sc.Endpoint = sc.TPEndpoints[0]
		d.SourceControl = append(d.SourceControl, sc)
		if derive {
			owners[rank] = DeriveOwnerID(d.Engine, d.Model, d.KVBlockSize, sc.Endpoint, rank)
		}
		if i > 0 {
			endpoints.WriteByte(',')
		}
		endpoints.Write(jsonText(strconv.Itoa(rank)))
		endpoints.WriteByte(':')
		endpoints.Write(jsonText(sc.Endpoint))
	}
	endpoints.WriteByte('}')
	d.RuntimeData = []RuntimeEntry{
		{Key: KeySourceControlEndpoints, Value: endpoints.Bytes()},
		{Key: KeyWorkerType, Value: jsonText(string(d.WorkerType))},
		{Key: KeyHintCapability, Value: json.RawMessage("true")},
	}
}

func jsonText(s string) json.RawMessage {
	b, _ := json.Marshal(s) // a string always marshals
	return b
}

func newDescriptor(engine Engine) *Descriptor {
	return &Descriptor{
		Engine:        engine,
		RunnerMode:    RunnerNone,
		Events:        []EventEndpoint{},
		SourceControl: []SourceControl{},
		OwnerIDs:      map[int]string{},
		RuntimeData:   []RuntimeEntry{},
	}
}

func setDPRange(d *Descriptor, start, size int) {
	d.DPStart, d.DPSize = start, size
	d.DPRanks = make([]int, size)
	for i := range d.DPRanks {
		d.DPRanks[i] = start + i
	}
}

// finish checks the invariants every built descriptor must hold; a failure
// here is a bug in this package, not in the configuration.
func finish(d *Descriptor) (*Descriptor, error) {
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("workerconfig: built an inconsistent descriptor: %w", err)
	}
	return d, nil
}

func refusal(reasons []string) string {
	return "hints refused: " + strings.Join(reasons, "; ")
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// workerTypeOf maps an engine's role value to a worker type: SGLang's
// disaggregation_mode (null or "null" is aggregated), or Dynamo's vLLM role
// ("agg" is aggregated). ok is false for any other value.
func workerTypeOf(engine Engine, v any) (WorkerType, bool) {
	switch v {
	case nil, disaggPrefill, disaggDecode:
	case disaggNull:
		if engine != EngineSGLang {
			return "", false
		}
	case vllmWorkerAgg, string(WorkerAggregated):
		if engine != EngineVLLM {
			return "", false
		}
	default:
		return "", false
	}
	switch v {
	case disaggPrefill:
		return WorkerPrefill, true
	case disaggDecode:
		return WorkerDecode, true
	}
	return WorkerAggregated, true
}
