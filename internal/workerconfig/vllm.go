package workerconfig

import (
	"fmt"
	"strconv"
)

// defaultVLLMBlockSize is vLLM's block size on CUDA when block_size is unset.
const defaultVLLMBlockSize = 16

// FromVLLM reads vLLM engine arguments (as JSON, kv_transfer_config and
// kv_events_config as objects or JSON text) into a descriptor. vLLM's
// arguments do not carry the worker's role; Dynamo's is read from
// worker_type or disaggregation_mode ("agg", "prefill", "decode"; absent
// means aggregated). Errors and refusals are as for FromSGLang.
func FromVLLM(engineArgs []byte, opt Options) (*Descriptor, error) {
	o, err := decodeObject(engineArgs, "")
	if err != nil {
		return nil, err
	}
	d := newDescriptor(EngineVLLM)
	d.SingleHost = opt.AllowLoopback
	if d.Model, err = modelName(o, vlServedModelName, vlModel); err != nil {
		return nil, err
	}
	if d.KVBlockSize, err = o.count(vlBlockSize, defaultVLLMBlockSize); err != nil {
		return nil, err
	}
	var pp, dcp, pcp, nnodes int
	for _, f := range []struct {
		key string
		dst *int
	}{{vlTPSize, &d.TPSize}, {vlPPSize, &pp}, {vlDCPSize, &dcp}, {vlPCPSize, &pcp}, {vlNNodes, &nnodes}} {
		if *f.dst, err = o.count(f.key, 1); err != nil {
			return nil, err
		}
	}
	// The engine core's scheduler reports one inventory per DP rank through
	// the connector, already covering all of its TP workers.
	d.ControlPortStride, d.TPRanksPerDPRank, d.InventoryAggregation = 1, 1, AggregateEngine
	if d.WorkerType, err = vllmWorkerType(o); err != nil {
		return nil, err
	}
	ports := portBook{}
	engineHost, _, err := o.str(vlHost)
	if err != nil {
		return nil, err
	}
	if o.present(vlPort) {
		p, err := portValue(o.m[vlPort], vlPort)
		if err != nil {
			return nil, err
		}
		if err := ports.addPort(p, vlPort+" (HTTP server)"); err != nil {
			return nil, err
		}
	}
	if err := vllmDPRange(d, o, opt); err != nil {
		return nil, err
	}
	events, err := parseEvents(o, EngineVLLM)
	if err != nil {
		return nil, err
	}
	tier, found, err := hintTier(o)
	if err != nil {
		return nil, err
	}
	if !found {
		d.Refusal = fmt.Sprintf("no KV cache runner takes hints: no entry of %s.%s.%s lists %q in %s",
			vlKVTransferConfig, vlConnectorExtra, vlSecondaryTiers, KeyHintCapability, kvcrRouterCapabilities)
		if err := addEvents(d, events, opt, "", engineHost, true, ports); err != nil {
			return nil, err
		}
		return finish(d)
	}
	d.RunnerMode, d.HintForwarding = RunnerSecondaryTier, true
	if tier.present(kvcrBlockSize) {
		bs, _, err := tier.integer(kvcrBlockSize)
		if err != nil {
			return nil, err
		}
		if bs != int64(d.KVBlockSize) {
			return nil, configErr(ErrBlockSizeMismatch, tier.name(kvcrBlockSize),
				"%d differs from %s %d: the runner's events would split tokens at another block size than the router does; set them equal", bs, vlBlockSize, d.KVBlockSize)
		}
	}
	owners, _, err := givenOwners(tier, d.DPRanks)
	if err != nil {
		return nil, err
	}
	guidance := fmt.Sprintf("set %s in the secondary tier to an address peers can reach", kvcrControlAdvertiseHost)
	raw, ok := tier.m[kvcrControlAdvertiseHost].(string)
	if !ok {
		return nil, configErr(ErrUndialableHost, tier.name(kvcrControlAdvertiseHost), "is not set (%s); %s", kindOf(tier.m[kvcrControlAdvertiseHost]), guidance)
	}
	host, warn, err := peerHost(raw, tier.name(kvcrControlAdvertiseHost), guidance, opt.Resolve, opt.AllowLoopback)
	if err != nil {
		return nil, err
	}
	if warn != "" {
		d.Warnings = append(d.Warnings, warn)
	}
	controlPorts, err := vllmControlPorts(tier, d.DPSize)
	if err != nil {
		return nil, err
	}
	if events == nil {
		return nil, configErr(ErrNoEvents, vlKVEventsConfig+"."+evEnable,
			"KV events are off, but runner inventory reaches the router only as KV events; set %s true (publisher %q)", evEnable, publisherZMQ)
	}
	if err := addEvents(d, events, opt, host, engineHost, true, ports); err != nil {
		return nil, err
	}
	if reasons := vllmRefusals(pp, dcp, pcp, nnodes); len(reasons) > 0 {
		d.Refusal = refusal(reasons)
		return finish(d)
	}
	rankPorts := make([][]int, len(controlPorts))
	for i, p := range controlPorts {
		if err := ports.addPort(p, fmt.Sprintf("%s of DP rank %d", tier.name(kvcrControlPorts), d.DPRanks[i])); err != nil {
			return nil, err
		}
		rankPorts[i] = []int{p}
	}
	completeHints(d, host, rankPorts, owners)
	return finish(d)
}

func vllmWorkerType(o object) (WorkerType, error) {
	wt, err := vllmRole(o, vlWorkerType)
	if err != nil {
		return "", err
	}
	if !o.present(vlDisaggregationMode) {
		return wt, nil
	}
	mode, err := vllmRole(o, vlDisaggregationMode)
	if err != nil {
		return "", err
	}
	if o.present(vlWorkerType) && mode != wt {
		return "", configErr(ErrUnsupportedOption, vlDisaggregationMode, "%s disagrees with %s %s; set one", mode, vlWorkerType, wt)
	}
	return mode, nil
}

func vllmRole(o object, key string) (WorkerType, error) {
	wt, ok := workerTypeOf(EngineVLLM, o.m[key])
	if !ok {
		return "", configErr(ErrUnsupportedOption, key, "%s is not a role; use %q, %q or %q",
			kindOrText(o.m[key]), vllmWorkerAgg, disaggPrefill, disaggDecode)
	}
	return wt, nil
}

// vllmDPRange: one rank when data_parallel_rank is set (external load
// balancing), else data_parallel_size_local ranks (or all) from
// data_parallel_start_rank.
func vllmDPRange(d *Descriptor, o object, opt Options) error {
	size, err := o.count(vlDPSize, 1)
	if err != nil {
		return err
	}
	start, local := 0, size
	rank, hasRank, err := o.rank(vlDPRank)
	if err != nil {
		return err
	}
	if hasRank {
		start, local = rank, 1
	} else {
		if start, _, err = o.rank(vlDPStartRank); err != nil {
			return err
		}
		if local, err = o.count(vlDPSizeLocal, size); err != nil {
			return err
		}
	}
	option := vlDPSizeLocal
	if hasRank {
		option = vlDPRank
	}
	if opt.DPStart != nil {
		start, option = *opt.DPStart, "--dp-start"
	}
	if start < 0 || start+local > size {
		return configErr(nil, option, "ranks %d..%d fall outside data_parallel_size %d", start, start+local-1, size)
	}
	setDPRange(d, start, local)
	return nil
}

// hintTier finds the one secondary tier advertising the hint capability.
func hintTier(o object) (object, bool, error) {
	kt, ok, err := o.nested(vlKVTransferConfig)
	if err != nil || !ok {
		return object{}, false, err
	}
	extra, ok, err := kt.nested(vlConnectorExtra)
	if err != nil || !ok {
		return object{}, false, err
	}
	var tiers []any
	switch v := extra.m[vlSecondaryTiers].(type) {
	case nil:
		return object{}, false, nil
	case []any:
		tiers = v
	default:
		return object{}, false, configErr(nil, extra.name(vlSecondaryTiers), "must be a list, got %s", kindOf(v))
	}
	var capable []object
	for i, t := range tiers {
		name := extra.name(vlSecondaryTiers) + "[" + strconv.Itoa(i) + "]"
		m, isMap := t.(map[string]any)
		if !isMap {
			return object{}, false, configErr(nil, name, "must be an object, got %s", kindOf(t))
		}
		tier := object{path: name, m: m}
		var caps []any
		switch v := m[kvcrRouterCapabilities].(type) {
		case nil:
		case []any:
			caps = v
		default:
			return object{}, false, configErr(nil, tier.name(kvcrRouterCapabilities), "must be a list of strings, got %s", kindOf(v))
		}
		for _, c := range caps {
			s, isStr := c.(string)
			if !isStr {
				return object{}, false, configErr(nil, tier.name(kvcrRouterCapabilities), "must be a list of strings, has %s", kindOf(c))
			}
			if s == KeyHintCapability || s == LegacyKeyHintCapability {
				capable = append(capable, tier)
				break
			}
		}
	}
	switch len(capable) {
	case 0:
		return object{}, false, nil
	case 1:
		return capable[0], true, nil
	}
	// A hint names one source endpoint per rank and cannot say which tier.
	return object{}, false, configErr(ErrUnsupportedOption, extra.name(vlSecondaryTiers),
		"%d tiers (%s, %s, ...) list %q in router_capabilities; exactly one may", len(capable), capable[0].path, capable[1].path, KeyHintCapability)
}

// vllmControlPorts: control_ports has one port per local DP rank, entry i
// for global rank start+i; control_port alone serves a single-rank worker.
func vllmControlPorts(tier object, ranks int) ([]int, error) {
	one, many := tier.present(kvcrControlPort), tier.present(kvcrControlPorts)
	switch {
	case one && many:
		return nil, configErr(ErrInvalidPort, tier.name(kvcrControlPorts), "set either %s or %s, not both", kvcrControlPort, kvcrControlPorts)
	case one && ranks == 1:
		p, err := portValue(tier.m[kvcrControlPort], tier.name(kvcrControlPort))
		return []int{p}, err
	case one || !many:
		return nil, configErr(ErrInvalidPort, tier.name(kvcrControlPorts),
			"is not set; set %s with one port per local DP rank (%d)", kvcrControlPorts, ranks)
	}
	list, ok := tier.m[kvcrControlPorts].([]any)
	if !ok {
		return nil, configErr(ErrInvalidPort, tier.name(kvcrControlPorts), "must be a list of ports, got %s", kindOf(tier.m[kvcrControlPorts]))
	}
	if len(list) != ranks {
		return nil, configErr(ErrInvalidPort, tier.name(kvcrControlPorts),
			"has %d ports for %d local DP ranks; give exactly one per rank, in rank order", len(list), ranks)
	}
	ports := make([]int, len(list))
	for i, v := range list {
		p, err := portValue(v, tier.name(kvcrControlPorts)+"["+strconv.Itoa(i)+"]")
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	return ports, nil
}

func vllmRefusals(pp, dcp, pcp, nnodes int) []string {
	var reasons []string
	if pp > 1 {
		reasons = append(reasons, fmt.Sprintf("pipeline parallel (pipeline_parallel_size=%d): each stage holds only its own layers of a block, but the tier advertises one control endpoint per DP rank, so no endpoint serves a whole block", pp))
	}
	if dcp > 1 || pcp > 1 {
		reasons = append(reasons, fmt.Sprintf("context parallel (decode_context_parallel_size=%d, prefill_context_parallel_size=%d): a block's KV is split across context-parallel ranks by token position, while a hint names whole blocks", dcp, pcp))
	}
	if nnodes > 1 {
		reasons = append(reasons, fmt.Sprintf("multi-node engine (nnodes=%d): workers on other nodes hold their shards on their own hosts, but the tier advertises one host", nnodes))
	}
	return reasons
}
