// This file holds FromSGLang: a descriptor from SGLang's server arguments and its runner options.

package workerconfig

import (
	"fmt"
	"strings"
)

// sglTopology is SGLang's parallel layout.
type sglTopology struct {
	tp, dp, pp, cp, nnodes, nodeRank, tokenizers int
	dpAttention                                  bool
}

// FromSGLang reads SGLang server arguments (the JSON object /get_server_info
// returns; unknown fields are ignored) into a descriptor. A hard
// configuration error is returned as an error matching ErrInvalidConfig; a
// topology that cannot take part in hints yields a descriptor with
// HintCapable false and the reason in Refusal.
func FromSGLang(serverInfo []byte, opt Options) (*Descriptor, error) {
	o, err := decodeObject(serverInfo, "")
	if err != nil {
		return nil, err
	}
	d := newDescriptor(EngineSGLang)
	d.SingleHost = opt.AllowLoopback
	if d.Model, err = modelName(o, SGLangServedModelName, SGLangModelPath); err != nil {
		return nil, err
	}
	if d.KVBlockSize, err = o.count(SGLangPageSize, 1); err != nil {
		return nil, err
	}
	t, err := sglangTopology(o)
	if err != nil {
		return nil, err
	}
	d.TPSize = t.tp
	d.ControlPortStride, d.TPRanksPerDPRank = 1, t.tp
	if t.dpAttention {
		d.TPRanksPerDPRank = t.tp / t.dp
		if t.dp > 1 {
			d.ControlPortStride = t.tp / t.dp
		}
	}
	d.InventoryAggregation = AggregateAllTPRanks
	wt, ok := workerTypeOf(EngineSGLang, o.m[SGLangDisaggregationMode])
	if !ok {
		return nil, configErr(ErrUnsupportedOption, SGLangDisaggregationMode, "%s is not a mode; use null, %q or %q",
			kindOrText(o.m[SGLangDisaggregationMode]), disaggPrefill, disaggDecode)
	}
	d.WorkerType = wt
	ports := portBook{}
	engineHost, _, err := o.str(SGLangHost)
	if err != nil {
		return nil, err
	}
	if o.present(SGLangPort) {
		p, err := portValue(o.m[SGLangPort], SGLangPort)
		if err != nil {
			return nil, err
		}
		if err := ports.addPort(p, SGLangPort+" (HTTP server)"); err != nil {
			return nil, err
		}
	}
	if wt == WorkerPrefill {
		// The decode worker asks the prefill's bootstrap server where a
		// request's KV is; the router tells it the port.
		d.BootstrapPort = DefaultSGLangBootstrapPort
		if o.present(SGLangBootstrapPort) {
			if d.BootstrapPort, err = portValue(o.m[SGLangBootstrapPort], SGLangBootstrapPort); err != nil {
				return nil, err
			}
		}
		if err := ports.addPort(d.BootstrapPort, SGLangBootstrapPort); err != nil {
			return nil, err
		}
	}
	start := 0
	if opt.DPStart != nil {
		start = *opt.DPStart
	}
	if start < 0 || start+t.dp > maxCount {
		return nil, configErr(nil, "--dp-start", "must be between 0 and %d, got %d", maxCount-t.dp, start)
	}
	setDPRange(d, start, t.dp)

	events, err := parseEvents(o, EngineSGLang)
	if err != nil {
		return nil, err
	}
	d.RunnerMode, err = sglangRunnerMode(o)
	if err != nil {
		return nil, err
	}
	if d.RunnerMode == RunnerNone {
		d.Refusal = fmt.Sprintf("no KV cache runner: hints need %s with %s %s, or %s %s",
			flagLinker, flagLinkerBackend, backendKVCR, flagHiCacheBackend, backendKVCR)
		if err := addEvents(d, events, opt, "", engineHost, false, ports); err != nil {
			return nil, err
		}
		return finish(d)
	}

	x, err := extraConfig(o, opt)
	if err != nil {
		return nil, err
	}
	if err := sglangRunnerOptions(d, x); err != nil {
		return nil, err
	}
	owners, _, err := givenOwners(x, d.DPRanks)
	if err != nil {
		return nil, err
	}
	if !d.HintForwarding {
		d.Refusal = fmt.Sprintf("%s is not true in %s: the runner takes no hints, so the worker is routed without them",
			x.name(KVCREnableRemoteHint), flagExtraConfig)
		if err := addEvents(d, events, opt, "", engineHost, false, ports); err != nil {
			return nil, err
		}
		return finish(d)
	}

	// From here on the operator asked for hints: every missing piece is a
	// configuration error, never a silent downgrade.
	if d.RunnerMode == RunnerLinker {
		if err := linkerInventory(d, x); err != nil {
			return nil, err
		}
	}
	host, warn, err := sglangAdvertiseHost(d.RunnerMode, x, opt)
	if err != nil {
		return nil, err
	}
	if warn != "" {
		d.Warnings = append(d.Warnings, warn)
	}
	if err := controlBindHost(x, hostOption(d.RunnerMode), opt.AllowLoopback); err != nil {
		return nil, err
	}
	if !x.present(KVCRControlPort) {
		return nil, configErr(ErrInvalidPort, x.name(KVCRControlPort), "is not set; set control_port in %s (rank i of this worker binds control_port + its attention rank)", flagExtraConfig)
	}
	base, err := portValue(x.m[KVCRControlPort], x.name(KVCRControlPort))
	if err != nil {
		return nil, err
	}
	if events == nil {
		return nil, configErr(ErrNoEvents, SGLangKVEventsConfig,
			"KV events are off, but runner inventory reaches the router only as KV events; set %s with publisher %q", flagKVEvents, publisherZMQ)
	}
	if err := addEvents(d, events, opt, host, engineHost, false, ports); err != nil {
		return nil, err
	}
	if reasons := sglangRefusals(t); len(reasons) > 0 {
		d.Refusal = refusal(reasons)
		return finish(d)
	}
	rankPorts, err := attentionRankPorts(d, base, x.name(KVCRControlPort), ports)
	if err != nil {
		return nil, err
	}
	completeHints(d, host, rankPorts, owners)
	return finish(d)
}

// attentionRankPorts lays out each local DP rank's runner ports: attention
// rank a binds base + a, and DP rank i's ranks start at base + i*stride.
func attentionRankPorts(d *Descriptor, base int, option string, ports portBook) ([][]int, error) {
	rankPorts := make([][]int, d.DPSize)
	for i := range rankPorts {
		for j := 0; j < d.TPRanksPerDPRank; j++ {
			rank := i*d.ControlPortStride + j
			p := base + rank
			if p > 65535 {
				return nil, configErr(ErrInvalidPort, option, "%d + attention rank %d exceeds 65535; lower control_port", base, rank)
			}
			if err := ports.addPort(p, fmt.Sprintf("%s + attention rank %d", option, rank)); err != nil {
				return nil, err
			}
			rankPorts[i] = append(rankPorts[i], p)
		}
	}
	return rankPorts, nil
}

func sglangTopology(o object) (sglTopology, error) {
	var t sglTopology
	var err error
	for _, f := range []struct {
		key string
		dst *int
	}{
		{SGLangTPSize, &t.tp}, {SGLangDPSize, &t.dp}, {SGLangPPSize, &t.pp}, {SGLangAttnCPSize, &t.cp},
		{SGLangNNodes, &t.nnodes}, {SGLangTokenizerWorkerNum, &t.tokenizers},
	} {
		if *f.dst, err = o.count(f.key, 1); err != nil {
			return t, err
		}
	}
	if t.nodeRank, _, err = o.rank(SGLangNodeRank); err != nil {
		return t, err
	}
	if t.nodeRank >= t.nnodes {
		return t, configErr(nil, SGLangNodeRank, "%d must be below nnodes (%d)", t.nodeRank, t.nnodes)
	}
	if t.dpAttention, err = o.boolean(SGLangEnableDPAttention, false); err != nil {
		return t, err
	}
	if t.dpAttention && t.tp%t.dp != 0 {
		return t, configErr(nil, SGLangTPSize, "%d must be a multiple of dp_size (%d) with enable_dp_attention", t.tp, t.dp)
	}
	return t, nil
}

// sglangRefusals lists what keeps a valid topology out of hints. Multiple
// tokenizer workers are not here: they tokenize and forward requests (a
// hint rides inside the request) while the schedulers alone own KV pages,
// runners and events, so they change nothing about placement.
func sglangRefusals(t sglTopology) []string {
	var reasons []string
	if t.pp > 1 {
		reasons = append(reasons, fmt.Sprintf("pipeline parallel (pp_size=%d): each stage's runner holds only its own layers of a page, and control_port + attention rank gives every stage of a DP rank the same port, so no advertised endpoint serves a whole block", t.pp))
	}
	if t.cp > 1 {
		reasons = append(reasons, fmt.Sprintf("context parallel (attn_cp_size=%d): a page's KV is split across context-parallel ranks by token position, while a hint names whole pages; a peer would fetch partial pages", t.cp))
	}
	if t.nnodes > 1 {
		reasons = append(reasons, fmt.Sprintf("multi-node engine (nnodes=%d): ranks on other nodes bind their runners on their own hosts, but a registration advertises one host for all ranks of the worker", t.nnodes))
	}
	if !t.dpAttention && t.dp > 1 && t.tp > 1 {
		reasons = append(reasons, fmt.Sprintf("data parallel without enable_dp_attention and tp_size %d > 1: DP ranks' control ports advance by 1 (stride 1) while each DP replica binds tp_size ports, so neighbouring replicas' ports overlap; enable DP attention or use tp_size 1", t.tp))
	}
	return reasons
}

func sglangRunnerMode(o object) (RunnerMode, error) {
	linker, err := o.boolean(SGLangEnableLinker, false)
	if err != nil {
		return "", err
	}
	linkerBackend, _, err := o.str(SGLangLinkerBackend)
	if err != nil {
		return "", err
	}
	hicacheBackend, _, err := o.str(SGLangHiCacheBackend)
	if err != nil {
		return "", err
	}
	switch {
	case linker && linkerBackend == backendKVCR:
		return RunnerLinker, nil
	case hicacheBackend == backendKVCR:
		on, err := o.boolean(SGLangHiCacheEnabled, true)
		if err != nil {
			return "", err
		}
		if !on {
			return "", configErr(ErrUnsupportedOption, SGLangHiCacheEnabled, "is false, but %s %s needs it; set %s", flagHiCacheBackend, backendKVCR, flagHierarchicalCache)
		}
		return RunnerHiCache, nil
	}
	return RunnerNone, nil
}

// extraConfig reads hicache_storage_backend_extra_config: a mapping, JSON
// text, or "@path" to a file of JSON. SGLang takes a file only when the text
// starts with "@" (no trimming) and picks the parser by extension; the agent
// has only a JSON parser, so it refuses the others rather than misread them.
func extraConfig(o object, opt Options) (object, error) {
	name := o.name(SGLangExtraConfig)
	text, isText := o.m[SGLangExtraConfig].(string)
	if isText && !strings.HasPrefix(text, "@") && strings.HasPrefix(strings.TrimSpace(text), "@") {
		return object{}, configErr(nil, name,
			"%q has whitespace before @: SGLang reads a file only when the value starts with @, and parses anything else as JSON text, which fails; remove the whitespace", text)
	}
	if !isText || !strings.HasPrefix(text, "@") {
		x, ok, err := o.nested(SGLangExtraConfig)
		if !ok && err == nil {
			x = object{path: name, m: map[string]any{}}
		}
		return x, err
	}
	path := text[1:]
	switch ext := strings.ToLower(pathExt(path)); ext {
	case ".json":
	case ".yaml", ".yml", ".toml":
		format := "YAML"
		if ext == ".toml" {
			format = "TOML"
		}
		return object{}, configErr(ErrUnsupportedOption, name,
			"refers to %q, a %s file SGLang reads, but the agent reads only JSON extra configs; pass the same settings as a .json file or as inline JSON", path, format)
	default:
		return object{}, configErr(ErrUnsupportedOption, name,
			"unsupported config file %q (extension %q): SGLang reads .json, .toml, .yaml or .yml, and the agent only .json", path, ext)
	}
	if opt.ReadFile == nil {
		return object{}, configErr(nil, name, "refers to file %q but reading files is not enabled here", path)
	}
	data, err := opt.ReadFile(path)
	if err != nil {
		return object{}, &ConfigError{Option: name, Msg: fmt.Sprintf("cannot read %q: %v", path, err), Err: err}
	}
	return decodeObject(data, name)
}

// pathExt is Python's os.path.splitext(p)[1], which SGLang uses: unlike
// filepath.Ext, leading dots of the base name start no extension, so
// "/etc/kvcr/.json" has none.
func pathExt(p string) string {
	base := p[strings.LastIndexByte(p, '/')+1:]
	i := strings.LastIndexByte(base, '.')
	if i < 0 || strings.Trim(base[:i], ".") == "" {
		return ""
	}
	return base[i:]
}

// hostOption is the option naming the advertised host in a mode.
func hostOption(mode RunnerMode) string {
	if mode == RunnerLinker {
		return KVCRAdvertiseHost
	}
	return KVCRControlAdvertiseHost
}

// sglangRunnerOptions applies the option rules of the selected mode.
func sglangRunnerOptions(d *Descriptor, x object) error {
	if d.RunnerMode == RunnerLinker {
		if x.has(KVCRControlAdvertiseHost) {
			return configErr(ErrUnsupportedOption, x.name(KVCRControlAdvertiseHost),
				"is a HiCache option; the KVCR linker rejects it as unknown: in linker mode set %s instead", KVCRAdvertiseHost)
		}
		if x.has(KVCRLegacyLocalDRAM) {
			return configErr(ErrUnsupportedOption, x.name(KVCRLegacyLocalDRAM),
				"is the legacy name the linker refuses; set %s (bytes of DRAM per worker) instead", KVCRLocalDRAMPerWorker)
		}
		if _, _, err := x.positive(KVCRLocalDRAMPerWorker); err != nil {
			return err
		}
	} else if x.has(KVCRAdvertiseHost) {
		return configErr(ErrUnsupportedOption, x.name(KVCRAdvertiseHost),
			"is the linker's option; the HiCache kvcr backend reads %s, set that instead", KVCRControlAdvertiseHost)
	}
	var err error
	if d.HintForwarding, err = x.boolean(KVCREnableRemoteHint, false); err != nil {
		return err
	}
	if err := timeouts(x); err != nil {
		return err
	}
	publish, err := x.boolean(KVCRPublishInventory, false)
	if err != nil {
		return err
	}
	d.ProcessLocalInventory = publish && x.has(KVCRServiceSocketPath) && !x.present(KVCRServiceSocketPath)
	return nil
}

// linkerInventory enforces the linker's inventory guarantees: each runner
// publishes what it holds itself, nothing from a shared service.
func linkerInventory(d *Descriptor, x object) error {
	if !x.has(KVCRPublishInventory) {
		return configErr(ErrInventoryGuarantee, x.name(KVCRPublishInventory),
			"is missing; set publish_inventory: true in %s so the runner reports its blocks", flagExtraConfig)
	}
	if on, _ := x.boolean(KVCRPublishInventory, false); !on {
		return configErr(ErrInventoryGuarantee, x.name(KVCRPublishInventory),
			"is false; set publish_inventory: true in %s so the runner reports its blocks", flagExtraConfig)
	}
	if !x.has(KVCRServiceSocketPath) || x.present(KVCRServiceSocketPath) {
		return configErr(ErrInventoryGuarantee, x.name(KVCRServiceSocketPath),
			"must be set to null: with a KVCR service socket the inventory would be the shared service's, not this process's own; set kvcr_service_socket_path: null in %s", flagExtraConfig)
	}
	if !d.ProcessLocalInventory {
		return configErr(ErrInventoryGuarantee, x.name(KVCRPublishInventory), "inventory is not process-local")
	}
	return nil
}

func timeouts(x object) error {
	op, abandon := int64(1000), int64(5000)
	if v, ok, err := x.positive(KVCROperationTimeoutMS); err != nil {
		return err
	} else if ok {
		op = v
	}
	if v, ok, err := x.positive(KVCRAbandonTimeoutMS); err != nil {
		return err
	} else if ok {
		abandon = v
	}
	if abandon < op {
		return configErr(nil, x.name(KVCRAbandonTimeoutMS),
			"%d is below operation_timeout_ms %d; a transfer is abandoned only after its operation deadline, set it at least as high", abandon, op)
	}
	return nil
}

// sglangAdvertiseHost returns the tcp:// host peers dial, from the option
// of the mode, with guidance in the operator's words.
func sglangAdvertiseHost(mode RunnerMode, x object, opt Options) (string, string, error) {
	key := hostOption(mode)
	guidance := fmt.Sprintf("set %s in %s to an address peers can reach", key, flagExtraConfig)
	raw, ok := x.m[key].(string)
	if !ok && x.present(key) {
		return "", "", configErr(ErrUndialableHost, x.name(key), "must be a string, got %s; %s", kindOf(x.m[key]), guidance)
	}
	if !ok {
		return "", "", configErr(ErrUndialableHost, x.name(key),
			"is not set, so the runner would advertise its default host (this machine's name, which often resolves to loopback) and peers could not dial it; %s", guidance)
	}
	return peerHost(raw, x.name(key), guidance, opt.Resolve, opt.AllowLoopback)
}

// controlBindHost rejects a control_host that binds loopback only: the
// advertised endpoint would then point at a socket peers cannot reach,
// unless every peer runs on this machine (Options.AllowLoopback).
func controlBindHost(x object, hostOption string, allowLoopback bool) error {
	raw, ok, err := x.str(KVCRControlHost)
	if err != nil || !ok || allowLoopback {
		return err
	}
	if _, problem := hostProblem(raw); strings.Contains(problem, "loopback") {
		return configErr(ErrUndialableHost, x.name(KVCRControlHost),
			"%q binds the runner's control socket to loopback only, so peers cannot connect; set control_host to 0.0.0.0 or an address peers reach (and %s to the same)", raw, hostOption)
	}
	return nil
}

func modelName(o object, served, path string) (string, error) {
	switch v := o.m[served].(type) {
	case string:
		if v != "" {
			return v, nil
		}
	case []any:
		if len(v) > 0 {
			if s, ok := v[0].(string); ok && s != "" {
				return s, nil
			}
		}
	}
	s, _, err := o.str(path)
	if err != nil {
		return "", err
	}
	if s == "" {
		return "", configErr(nil, path, "is missing; the model names the worker's cache owners")
	}
	return s, nil
}

func kindOrText(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return kindOf(v)
}
