// This file holds the conversion of a state agent's registration into the router's worker.

package follow

import (
	"fmt"
	"strconv"

	"kvrouter/internal/discovery"
	"kvrouter/internal/hints"
	"kvrouter/internal/router"
)

// workerFromRegistration turns a state agent's registration into the
// router's Worker. A capability that does not parse, or a registration
// that carries a refusal, leaves the worker routable without hints: the
// reason goes to Refusal. It lives here, at the edge, so that the router
// does not link discovery.
func workerFromRegistration(dw discovery.Worker) (router.Worker, error) {
	if err := dw.Validate(); err != nil {
		return router.Worker{}, fmt.Errorf("%w: %v", router.ErrBadWorker, err)
	}
	engine := dw.Engine
	if engine == "" {
		engine = router.EngineVLLM
	}
	p, err := router.PlacementFor(engine)
	if err != nil {
		return router.Worker{}, err
	}
	w := router.Worker{
		ID: dw.ID, Model: dw.Model, URL: dw.URL, Engine: engine, BlockSize: dw.BlockSize,
		DPStart: dw.DPStart, DPSize: dw.DPSize, Mode: router.ModeEvents, Origin: router.OriginDiscovery,
		Placement: p, Refusal: dw.Refusal,
	}
	if len(dw.Owners) > 0 {
		w.Owners = make(map[int]string, len(dw.Owners))
		for k, owner := range dw.Owners {
			rank, err := strconv.Atoi(k)
			if err != nil || !w.HasRank(rank) || owner == "" {
				return router.Worker{}, fmt.Errorf("%w: %s: owners[%q] = %q: want a global DP rank of the worker and an owner id",
					router.ErrBadWorker, dw.ID, k, owner)
			}
			w.Owners[rank] = owner
		}
	}
	if dw.Role != "" {
		if w.Role, err = hints.ParseWorkerType(dw.Role); err != nil {
			return router.Worker{}, fmt.Errorf("%w: %s: role: %v", router.ErrBadWorker, dw.ID, err)
		}
	}
	w.BootstrapPort = dw.BootstrapPort
	if w.Refusal != "" {
		return w, nil
	}
	data, err := dw.RuntimeData.Map()
	if err == nil {
		w.Capability, err = hints.ParseCapability(data)
	}
	if err != nil {
		w.Capability = hints.Capability{}
		w.Refusal = "runtime_data: " + err.Error()
	}
	if dw.Role == "" {
		// An agent that predates roles said it only to hint peers.
		w.Role = w.Capability.Type
	}
	return w, nil
}
