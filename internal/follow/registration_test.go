package follow

import (
	"errors"
	"testing"

	"kvrouter/internal/discovery"
	"kvrouter/internal/hints"
	"kvrouter/internal/router"
)

func TestWorkerFromRegistration(t *testing.T) {
	rd := func(kv ...any) discovery.RuntimeData {
		var d discovery.RuntimeData
		for i := 0; i < len(kv); i += 2 {
			d, _ = d.Set(kv[i].(string), kv[i+1])
		}
		return d
	}
	base := discovery.Worker{ID: "w", Model: "m", URL: "http://w", BlockSize: 16, DPStart: 2, DPSize: 2}
	tests := []struct {
		name    string
		edit    func(*discovery.Worker)
		err     bool
		refusal bool
		check   func(router.Worker) bool
	}{
		{name: "plain vLLM worker", check: func(w router.Worker) bool {
			return w.Engine == router.EngineVLLM && w.Placement == hints.PlaceVLLM && !w.Capability.CanConsume
		}},
		{name: "SGLang with capability and owners",
			edit: func(d *discovery.Worker) {
				d.Engine = "sglang"
				d.RuntimeData = rd("router_hint_source_control_endpoints", map[string]string{"2": "tcp://h:1", "3": "tcp://h:2"},
					"router_hint_worker_type", "prefill", "router_hint", true)
				d.Owners = map[string]string{"3": "o3"}
			},
			check: func(w router.Worker) bool {
				return w.Placement == hints.PlaceSGLang && w.Capability.CanConsume && w.Capability.Type == hints.TypePrefill &&
					w.Capability.Endpoints[3] == "tcp://h:2" && w.Owners[3] == "o3"
			}},
		{name: "a bad capability routes without hints",
			edit:    func(d *discovery.Worker) { d.RuntimeData = rd("router_hint", "yes") },
			refusal: true, check: func(w router.Worker) bool { return !w.Capability.CanConsume }},
		{name: "a refusal wins over the capability",
			edit: func(d *discovery.Worker) {
				d.RuntimeData = rd("router_hint", true)
				d.Refusal = "DP>1 is not supported"
			},
			refusal: true, check: func(w router.Worker) bool { return !w.Capability.CanConsume }},
		{name: "a role from an agent that predates roles: the runtime data's worker type",
			edit: func(d *discovery.Worker) {
				d.RuntimeData = rd("router_hint_source_control_endpoints", map[string]string{"2": "tcp://h:1", "3": "tcp://h:2"},
					"router_hint_worker_type", "decode", "router_hint", true)
			},
			check: func(w router.Worker) bool { return w.Role == hints.TypeDecode }},
		{name: "a refused worker keeps its role and bootstrap port",
			edit: func(d *discovery.Worker) {
				d.Engine, d.Role, d.BootstrapPort, d.Refusal = "sglang", "prefill", 8998, "no runner"
			},
			refusal: true, check: func(w router.Worker) bool { return w.Role == hints.TypePrefill && w.BootstrapPort == 8998 }},
		{name: "unknown role", edit: func(d *discovery.Worker) { d.Role = "both" }, err: true},
		{name: "owner of a rank outside the worker", edit: func(d *discovery.Worker) { d.Owners = map[string]string{"0": "o"} }, err: true},
		{name: "unknown engine", edit: func(d *discovery.Worker) { d.Engine = "tgi" }, err: true},
		{name: "invalid registration", edit: func(d *discovery.Worker) { d.BlockSize = 0 }, err: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := base
			if tc.edit != nil {
				tc.edit(&d)
			}
			w, err := workerFromRegistration(d)
			if tc.err {
				if !errors.Is(err, router.ErrBadWorker) {
					t.Fatalf("err = %v, want ErrBadWorker", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (w.Refusal != "") != tc.refusal || !tc.check(w) {
				t.Fatalf("worker %+v", w)
			}
		})
	}
}
