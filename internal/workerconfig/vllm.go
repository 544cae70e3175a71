// This file holds FromVLLM: a descriptor from vLLM's engine arguments and its KVCR secondary tier.

package workerconfig

import (
	"fmt"
	"strconv"
)

// defaultVLLMBlockSize is vLLM's block size on CUDA when block_size is unset.
const defaultVLLMBlockSize = 16

// FromVLLM reads vLLM engine arguments (as JSON, kv_transfer_config and
// kv_events_config as objects or JSON text) into a descriptor. The
// worker's role is Dynamo's, from worker_type or disaggregation_mode
// ("agg", "prefill", "decode"), else what kv_transfer_config.kv_role
// implies (kv_producer prefill, kv_consumer decode); kv_both, or nothing,
// means aggregated. Errors and refusals are as for FromSGLang.
func FromVLLM(engineArgs []byte, opt Options) (*Descriptor, error) {
	o, err := decodeObject(engineArgs, "")
	if err != nil {
		return nil, err
	}
	d := newDescriptor(EngineVLLM)
	d.SingleHost = opt.AllowLoopback
	if d.Model, err = modelName(o, VLLMServedModelName, VLLMModel); err != nil {
		return nil, err
	}
	if d.KVBlockSize, err = o.count(VLLMBlockSize, defaultVLLMBlockSize); err != nil {
		return nil, err
	}
	var pp, dcp, pcp, nnodes int
	for _, f := range []struct {
		key string
		dst *int
	}{{VLLMTPSize, &d.TPSize}, {VLLMPPSize, &pp}, {VLLMDCPSize, &dcp}, {VLLMPCPSize, &pcp}, {VLLMNNodes, &nnodes}} {
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
	engineHost, _, err := o.str(VLLMHost)
	if err != nil {
		return nil, err
	}
	if o.present(VLLMPort) {
		p, err := portValue(o.m[VLLMPort], VLLMPort)
		if err != nil {
			return nil, err
		}
		if err := ports.addPort(p, VLLMPort+" (HTTP server)"); err != nil {
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
			VLLMKVTransferConfig, VLLMConnectorExtra, VLLMSecondaryTiers, KeyHintCapability, KVCRRouterCapabilities)
		if err := addEvents(d, events, opt, "", engineHost, true, ports); err != nil {
			return nil, err
		}
		return finish(d)
	}
	d.RunnerMode, d.HintForwarding = RunnerSecondaryTier, true
	if tier.present(KVCRBlockSize) {
		bs, _, err := tier.integer(KVCRBlockSize)
		if err != nil {
			return nil, err
		}
		if bs != int64(d.KVBlockSize) {
			return nil, configErr(ErrBlockSizeMismatch, tier.name(KVCRBlockSize),
				"%d differs from %s %d: the runner's events would split tokens at another block size than the router does; set them equal", bs, VLLMBlockSize, d.KVBlockSize)
		}
	}
	owners, _, err := givenOwners(tier, d.DPRanks)
	if err != nil {
		return nil, err
	}
	guidance := fmt.Sprintf("set %s in the secondary tier to an address peers can reach", KVCRControlAdvertiseHost)
	raw, ok := tier.m[KVCRControlAdvertiseHost].(string)
	if !ok {
		return nil, configErr(ErrUndialableHost, tier.name(KVCRControlAdvertiseHost), "is not set (%s); %s", kindOf(tier.m[KVCRControlAdvertiseHost]), guidance)
	}
	host, warn, err := peerHost(raw, tier.name(KVCRControlAdvertiseHost), guidance, opt.Resolve, opt.AllowLoopback)
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
		return nil, configErr(ErrNoEvents, VLLMKVEventsConfig+"."+EventsEnable,
			"KV events are off, but runner inventory reaches the router only as KV events; set %s true (publisher %q)", EventsEnable, publisherZMQ)
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
		if err := ports.addPort(p, fmt.Sprintf("%s of DP rank %d", tier.name(KVCRControlPorts), d.DPRanks[i])); err != nil {
			return nil, err
		}
		rankPorts[i] = []int{p}
	}
	completeHints(d, host, rankPorts, owners)
	return finish(d)
}

func vllmWorkerType(o object) (WorkerType, error) {
	wt, err := vllmRole(o, VLLMWorkerType)
	if err != nil {
		return "", err
	}
	if o.present(VLLMDisaggregationMode) {
		mode, err := vllmRole(o, VLLMDisaggregationMode)
		if err != nil {
			return "", err
		}
		if o.present(VLLMWorkerType) && mode != wt {
			return "", configErr(ErrUnsupportedOption, VLLMDisaggregationMode, "%s disagrees with %s %s; set one", mode, VLLMWorkerType, wt)
		}
		wt = mode
	}
	dynamo := o.present(VLLMWorkerType) || o.present(VLLMDisaggregationMode)
	kv, err := vllmKVRole(o)
	switch {
	case err != nil:
		return "", err
	case kv == "":
		// kv_both (NIXL's usual setting for both sides) or no connector:
		// the KV role does not tell.
	case !dynamo:
		wt = kv
	case kv != wt:
		return "", configErr(ErrUnsupportedOption, VLLMKVTransferConfig+"."+VLLMKVRole,
			"%s makes the engine a %s worker but its role is %s; make them agree", kvRoleOf(kv), kv, wt)
	}
	return wt, nil
}

// vllmKVRole is the worker type kv_transfer_config.kv_role implies:
// kv_producer a prefill worker, kv_consumer a decode worker, "" when it
// implies none (kv_both, or unset).
func vllmKVRole(o object) (WorkerType, error) {
	kt, ok, err := o.nested(VLLMKVTransferConfig)
	if err != nil || !ok {
		return "", err
	}
	switch v := kt.m[VLLMKVRole].(type) {
	case nil:
		return "", nil
	case string:
		switch v {
		case kvRoleProducer:
			return WorkerPrefill, nil
		case kvRoleConsumer:
			return WorkerDecode, nil
		case kvRoleBoth:
			return "", nil
		}
	}
	return "", configErr(ErrUnsupportedOption, kt.name(VLLMKVRole), "%s is not a KV role; use %q, %q or %q",
		kindOrText(kt.m[VLLMKVRole]), kvRoleProducer, kvRoleConsumer, kvRoleBoth)
}

func kvRoleOf(t WorkerType) string {
	if t == WorkerPrefill {
		return kvRoleProducer
	}
	return kvRoleConsumer
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
	size, err := o.count(VLLMDPSize, 1)
	if err != nil {
		return err
	}
	start, local := 0, size
	rank, hasRank, err := o.rank(VLLMDPRank)
	if err != nil {
		return err
	}
	if hasRank {
		start, local = rank, 1
	} else {
		if start, _, err = o.rank(VLLMDPStartRank); err != nil {
			return err
		}
		if local, err = o.count(VLLMDPSizeLocal, size); err != nil {
			return err
		}
	}
	option := VLLMDPSizeLocal
	if hasRank {
		option = VLLMDPRank
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
	kt, ok, err := o.nested(VLLMKVTransferConfig)
	if err != nil || !ok {
		return object{}, false, err
	}
	extra, ok, err := kt.nested(VLLMConnectorExtra)
	if err != nil || !ok {
		return object{}, false, err
	}
	var tiers []any
	switch v := extra.m[VLLMSecondaryTiers].(type) {
	case nil:
		return object{}, false, nil
	case []any:
		tiers = v
	default:
		return object{}, false, configErr(nil, extra.name(VLLMSecondaryTiers), "must be a list, got %s", kindOf(v))
	}
	var capable []object
	for i, t := range tiers {
		name := extra.name(VLLMSecondaryTiers) + "[" + strconv.Itoa(i) + "]"
		m, isMap := t.(map[string]any)
		if !isMap {
			return object{}, false, configErr(nil, name, "must be an object, got %s", kindOf(t))
		}
		tier := object{path: name, m: m}
		var caps []any
		switch v := m[KVCRRouterCapabilities].(type) {
		case nil:
		case []any:
			caps = v
		default:
			return object{}, false, configErr(nil, tier.name(KVCRRouterCapabilities), "must be a list of strings, got %s", kindOf(v))
		}
		for _, c := range caps {
			s, isStr := c.(string)
			if !isStr {
				return object{}, false, configErr(nil, tier.name(KVCRRouterCapabilities), "must be a list of strings, has %s", kindOf(c))
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
	return object{}, false, configErr(ErrUnsupportedOption, extra.name(VLLMSecondaryTiers),
		"%d tiers (%s, %s, ...) list %q in router_capabilities; exactly one may", len(capable), capable[0].path, capable[1].path, KeyHintCapability)
}

// vllmControlPorts: control_ports has one port per local DP rank, entry i
// for global rank start+i; control_port alone serves a single-rank worker.
func vllmControlPorts(tier object, ranks int) ([]int, error) {
	one, many := tier.present(KVCRControlPort), tier.present(KVCRControlPorts)
	switch {
	case one && many:
		return nil, configErr(ErrInvalidPort, tier.name(KVCRControlPorts), "set either %s or %s, not both", KVCRControlPort, KVCRControlPorts)
	case one && ranks == 1:
		p, err := portValue(tier.m[KVCRControlPort], tier.name(KVCRControlPort))
		return []int{p}, err
	case one || !many:
		return nil, configErr(ErrInvalidPort, tier.name(KVCRControlPorts),
			"is not set; set %s with one port per local DP rank (%d)", KVCRControlPorts, ranks)
	}
	list, ok := tier.m[KVCRControlPorts].([]any)
	if !ok {
		return nil, configErr(ErrInvalidPort, tier.name(KVCRControlPorts), "must be a list of ports, got %s", kindOf(tier.m[KVCRControlPorts]))
	}
	if len(list) != ranks {
		return nil, configErr(ErrInvalidPort, tier.name(KVCRControlPorts),
			"has %d ports for %d local DP ranks; give exactly one per rank, in rank order", len(list), ranks)
	}
	ports := make([]int, len(list))
	for i, v := range list {
		p, err := portValue(v, tier.name(KVCRControlPorts)+"["+strconv.Itoa(i)+"]")
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
