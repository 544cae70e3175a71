package mocker

import (
	"encoding/json"
	"net"

	"kvrouter/internal/runner"
)

// eventsConfig is the kv_events_config both engines take: the base
// endpoints, before the per-rank port offset.
func (e *Engine) eventsConfig() map[string]any {
	ep := e.cfg.EventsEndpoint
	if e.cfg.EventsConnect != "" {
		ep = e.cfg.EventsConnect
	}
	m := map[string]any{evPublisher: evPublisherZMQ, evEndpoint: ep, evTopic: e.cfg.Topic}
	if e.cfg.ReplayEndpoint != replayNone {
		m[evReplayEndpoint] = e.cfg.ReplayEndpoint
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
		kvcrControlPort:        c.ControlPort,
		kvcrAdvertiseHost:      c.AdvertiseHost,
		kvcrEnableRemoteHint:   true,
		kvcrPublishInventory:   true,
		kvcrServiceSocketPath:  nil,
		kvcrLocalDRAMPerWorker: c.RunnerBlocks * c.blockBytes() / c.TP,
		kvcrOperationTimeoutMS: runner.DefaultOperationTimeout.Milliseconds(),
		kvcrAbandonTimeoutMS:   runner.DefaultAbandonTimeout.Milliseconds(),
	}
	return map[string]any{
		sglModelPath:          c.Model,
		sglServedModelName:    c.Model,
		sglPageSize:           c.BlockSize,
		sglTPSize:             tpSize,
		sglDPSize:             c.DP,
		sglEnableDPAttention:  c.DP > 1,
		sglPPSize:             1,
		sglAttnCPSize:         1,
		sglNNodes:             1,
		sglNodeRank:           0,
		sglTokenizerWorkerNum: 1,
		sglDisaggregationMode: sglDisaggNull,
		sglEnableLinker:       true,
		sglLinkerBackend:      kvcrBackend,
		sglHiCacheBackend:     nil,
		sglHiCacheEnabled:     false,
		sglExtraConfig:        jsonText(extra),
		sglKVEventsConfig:     jsonText(e.eventsConfig()),
		sglHost:               e.httpHost(),
		sglPort:               e.httpPort(),
		sglMaxRunning:         c.MaxNumSeqs,
		sglChunkedPrefill:     c.MaxBatchedTokens,
		sglContextLength:      c.MaxModelLen,
		sglRandomSeed:         c.ModelSeed,
		sglStatus:             sglStatusReady,
		sglVersion:            "kvrouter-mocker",
	}
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
	ev[evEnable] = true
	return map[string]any{
		vlModel:            c.Model,
		vlServedModelName:  c.Model,
		vlBlockSize:        c.BlockSize,
		vlTPSize:           c.TP,
		vlPPSize:           1,
		vlDPSize:           c.DP,
		vlDPSizeLocal:      c.DP,
		vlMaxNumSeqs:       c.MaxNumSeqs,
		vlMaxBatchedTokens: c.MaxBatchedTokens,
		vlMaxModelLen:      c.MaxModelLen,
		vlPrefixCaching:    true,
		vlHashAlgo:         vlHashAlgoSHA256CBOR,
		vlSeed:             c.ModelSeed,
		vlHost:             e.httpHost(),
		vlPort:             e.httpPort(),
		vlWorkerType:       vlWorkerAgg,
		vlKVEventsConfig:   ev,
		vlKVTransferConfig: map[string]any{
			vlKVConnector: vlKVConnectorKVCR,
			vlKVRole:      vlKVRoleBoth,
			vlConnectorExtra: map[string]any{
				vlSecondaryTiers: []any{map[string]any{
					vlTierName:           kvcrBackend,
					vlRouterCapabilities: []string{vlCapRouterHint},
					vlAdvertiseHost:      c.AdvertiseHost,
					vlControlPorts:       ports,
					vlBlockSize:          c.BlockSize,
				}},
			},
		},
	}
}
