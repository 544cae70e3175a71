// This file holds the engine's configuration as SGLang's /get_server_info or vLLM's arguments.

package mocker

import (
	"encoding/json"
	"net"

	"kvrouter/internal/runner"
	"kvrouter/internal/workerconfig"
)

// eventsConfig is the kv_events_config both engines take: the base
// endpoints, before the per-rank port offset.
func (e *Engine) eventsConfig() map[string]any {
	ep := e.cfg.EventsEndpoint
	if e.cfg.EventsConnect != "" {
		ep = e.cfg.EventsConnect
	}
	m := map[string]any{workerconfig.EventsPublisher: evPublisherZMQ, workerconfig.EventsEndpoint: ep, workerconfig.EventsTopic: e.cfg.Topic}
	if e.cfg.ReplayEndpoint != replayNone {
		m[workerconfig.EventsReplayEndpoint] = e.cfg.ReplayEndpoint
	}
	if e.cfg.SnapshotEndpoint != "" {
		m[workerconfig.EventsSnapshot] = e.cfg.SnapshotEndpoint
	}
	return m
}

func (e *Engine) httpHost() string {
	host, _, err := net.SplitHostPort(e.ln.Addr().String())
	if err != nil {
		return e.cfg.AdvertiseHost
	}
	return host
}

func jsonText(v any) string {
	b, _ := json.Marshal(v) // maps of strings, numbers, bools and nil always marshal
	return string(b)
}

// serverInfo is the engine's configuration as SGLang's /get_server_info
// returns its ServerArgs: a TP-sized engine with the KVCR linker in
// process-local inventory mode. DP ranks are attention-DP ranks, so that DP
// rank d's runners bind control_port + d*TP + t, the port rule SGLang's
// linker follows (stride tp_size / dp_size).
func (e *Engine) serverInfo() map[string]any {
	c := &e.cfg
	tpSize := c.TP * c.DP
	extra := map[string]any{
		workerconfig.KVCRControlPort:        c.ControlPort,
		workerconfig.KVCRAdvertiseHost:      c.AdvertiseHost,
		workerconfig.KVCREnableRemoteHint:   true,
		workerconfig.KVCRPublishInventory:   true,
		workerconfig.KVCRServiceSocketPath:  nil,
		workerconfig.KVCRLocalDRAMPerWorker: c.RunnerBlocks * c.blockBytes() / c.TP,
		workerconfig.KVCROperationTimeoutMS: runner.DefaultOperationTimeout.Milliseconds(),
		workerconfig.KVCRAbandonTimeoutMS:   runner.DefaultAbandonTimeout.Milliseconds(),
	}
	mode := any(sglDisaggNull)
	if c.Role != RoleAggregated {
		mode = c.Role
	}
	info := map[string]any{
		workerconfig.SGLangModelPath:          c.Model,
		workerconfig.SGLangServedModelName:    c.Model,
		workerconfig.SGLangPageSize:           c.BlockSize,
		workerconfig.SGLangTPSize:             tpSize,
		workerconfig.SGLangDPSize:             c.DP,
		workerconfig.SGLangEnableDPAttention:  c.DP > 1,
		workerconfig.SGLangPPSize:             1,
		workerconfig.SGLangAttnCPSize:         1,
		workerconfig.SGLangNNodes:             1,
		workerconfig.SGLangNodeRank:           0,
		workerconfig.SGLangTokenizerWorkerNum: 1,
		workerconfig.SGLangDisaggregationMode: mode,
		workerconfig.SGLangEnableLinker:       true,
		workerconfig.SGLangLinkerBackend:      kvcrBackend,
		workerconfig.SGLangHiCacheBackend:     nil,
		workerconfig.SGLangHiCacheEnabled:     false,
		workerconfig.SGLangExtraConfig:        jsonText(extra),
		workerconfig.SGLangKVEventsConfig:     jsonText(e.eventsConfig()),
		workerconfig.SGLangHost:               e.httpHost(),
		workerconfig.SGLangPort:               e.httpPort(),
		sglMaxRunning:                         c.MaxNumSeqs,
		sglChunkedPrefill:                     c.MaxBatchedTokens,
		sglContextLength:                      c.MaxModelLen,
		sglRandomSeed:                         c.ModelSeed,
		sglStatus:                             sglStatusReady,
		sglVersion:                            "kvrouter-mocker",
		sglDecodeRadixCache:                   false,
	}
	if c.Role == RolePrefill {
		info[workerconfig.SGLangBootstrapPort] = c.BootstrapPort
		if a := e.BootstrapAddr(); a != nil {
			info[workerconfig.SGLangBootstrapPort] = a.(*net.TCPAddr).Port
		}
	}
	return info
}

// engineArgs is the engine's configuration as vLLM engine arguments with
// the KVCR connector's secondary tier. TP rank t of DP rank d serves on
// control_ports[d] + t; the tier lists rank 0's port of each DP rank.
func (e *Engine) engineArgs() map[string]any {
	c := &e.cfg
	ports := make([]int, c.DP)
	for d := range ports {
		ports[d] = c.controlPort(d, 0)
	}
	ev := e.eventsConfig()
	ev[workerconfig.EventsEnable] = true
	role, kvRole := vlWorkerAgg, vlKVRoleBoth
	switch c.Role {
	case RolePrefill:
		role, kvRole = RolePrefill, kvRoleProducer
	case RoleDecode:
		role, kvRole = RoleDecode, kvRoleConsumer
	}
	return map[string]any{
		workerconfig.VLLMModel:           c.Model,
		workerconfig.VLLMServedModelName: c.Model,
		workerconfig.VLLMBlockSize:       c.BlockSize,
		workerconfig.VLLMTPSize:          c.TP,
		workerconfig.VLLMPPSize:          1,
		workerconfig.VLLMDPSize:          c.DP,
		workerconfig.VLLMDPSizeLocal:     c.DP,
		vlMaxNumSeqs:                     c.MaxNumSeqs,
		vlMaxBatchedTokens:               c.MaxBatchedTokens,
		vlMaxModelLen:                    c.MaxModelLen,
		vlPrefixCaching:                  true,
		vlHashAlgo:                       vlHashAlgoSHA256CBOR,
		vlSeed:                           c.ModelSeed,
		workerconfig.VLLMHost:            e.httpHost(),
		workerconfig.VLLMPort:            e.httpPort(),
		workerconfig.VLLMWorkerType:      role,
		workerconfig.VLLMKVEventsConfig:  ev,
		workerconfig.VLLMKVTransferConfig: map[string]any{
			vlKVConnector: vlKVConnectorKVCR,
			vlKVRole:      kvRole,
			workerconfig.VLLMConnectorExtra: map[string]any{
				workerconfig.VLLMSecondaryTiers: []any{map[string]any{
					vlTierName:                 kvcrBackend,
					vlRouterCapabilities:       []string{vlCapRouterHint},
					vlAdvertiseHost:            c.AdvertiseHost,
					vlControlPorts:             ports,
					workerconfig.VLLMBlockSize: c.BlockSize,
				}},
			},
		},
	}
}
