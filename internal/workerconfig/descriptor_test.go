package workerconfig

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"kvrouter/internal/kvevents"
)

// buildCase builds the descriptor of a data-driven case that must succeed.
func buildCase(t *testing.T, engine Engine, name string) *Descriptor {
	t.Helper()
	raw, err := os.ReadFile("testdata/" + string(engine) + "/" + name + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var c caseFile
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	d, err := Build(engine, c.Config, c.Options.options())
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return d
}

// Each mutation breaks one descriptor check of docs/wire.md §5.6; Validate must name it.
func TestValidateCatchesBrokenDescriptors(t *testing.T) {
	tests := []struct {
		name   string
		base   string // sglang case
		mutate func(d *Descriptor)
		want   string
	}{
		{"hint forwarding off", "dp_attention", func(d *Descriptor) { d.HintForwarding = false }, "hint forwarding"},
		{"inventory not process-local", "dp_attention", func(d *Descriptor) { d.ProcessLocalInventory = false }, "process-local"},
		{"no runner", "dp_attention", func(d *Descriptor) { d.RunnerMode = RunnerNone }, "without a runner"},
		{"no events", "dp_attention", func(d *Descriptor) { d.Events = nil }, "without KV events"},
		{"refusal on a capable worker", "dp_attention", func(d *Descriptor) { d.Refusal = "x" }, "refusal"},
		{"rank gap", "dp_attention", func(d *Descriptor) { d.DPRanks[2] = 9 }, "dp_ranks[2]"},
		{"duplicate rank", "dp_attention", func(d *Descriptor) { d.DPRanks[1] = 0 }, "dp_ranks[1]"},
		{"ranks beyond the range", "dp_attention", func(d *Descriptor) { d.DPRanks = append(d.DPRanks, 4) }, "dp_ranks has 5"},
		{"event ranks", "dp_attention", func(d *Descriptor) { d.Events[3].DPRank = 7 }, "event_endpoints[3]"},
		{"missing source", "dp_attention", func(d *Descriptor) { d.SourceControl = d.SourceControl[:3] }, "source_control has 3"},
		{"source rank", "dp_attention", func(d *Descriptor) { d.SourceControl[0].DPRank = 1 }, "source_control[0]"},
		{"shared endpoint", "dp_attention", func(d *Descriptor) {
			d.SourceControl[1].TPEndpoints[1] = d.SourceControl[0].TPEndpoints[0]
		}, "share control endpoint"},
		{"tp endpoints count", "dp_attention", func(d *Descriptor) {
			d.SourceControl[0].TPEndpoints = d.SourceControl[0].TPEndpoints[:1]
		}, "TP endpoints"},
		{"loopback endpoint", "linker_tp1_full", func(d *Descriptor) {
			d.SourceControl[0].Endpoint = "tcp://127.0.0.1:25000"
			d.SourceControl[0].TPEndpoints[0] = d.SourceControl[0].Endpoint
		}, "loopback"},
		{"duplicate owner", "dp_attention", func(d *Descriptor) { d.OwnerIDs[1] = d.OwnerIDs[0] }, "share owner"},
		{"malformed owner", "dp_attention", func(d *Descriptor) { d.OwnerIDs[2] = "x" }, "owner id"},
		{"owner of another rank", "dp_attention", func(d *Descriptor) { delete(d.OwnerIDs, 3); d.OwnerIDs[9] = d.OwnerIDs[0] + "" }, "no owner id for DP rank 3"},
		{"runtime order", "dp_attention", func(d *Descriptor) {
			d.RuntimeData[0], d.RuntimeData[2] = d.RuntimeData[2], d.RuntimeData[0]
		}, "in that order"},
		{"capability only", "dp_attention", func(d *Descriptor) { d.RuntimeData = d.RuntimeData[2:] }, "in that order"},
		{"legacy key", "dp_attention", func(d *Descriptor) { d.RuntimeData[2].Key = LegacyKeyHintCapability }, "in that order"},
		{"endpoint disagrees", "dp_attention", func(d *Descriptor) {
			d.RuntimeData[0].Value = json.RawMessage(`{"0":"tcp://10.0.0.7:1","1":"tcp://10.0.0.7:25002","2":"tcp://10.0.0.7:25004","3":"tcp://10.0.0.7:25006"}`)
		}, "router_hint_source_control_endpoints[0]"},
		{"endpoint missing", "dp_attention", func(d *Descriptor) {
			d.RuntimeData[0].Value = json.RawMessage(`{"0":"tcp://10.0.0.7:25000"}`)
		}, "has 1 ranks"},
		{"worker type disagrees", "dp_attention", func(d *Descriptor) { d.RuntimeData[1].Value = json.RawMessage(`"decode"`) }, "router_hint_worker_type"},
		{"capability false", "dp_attention", func(d *Descriptor) { d.RuntimeData[2].Value = json.RawMessage(`false`) }, "want true"},
		{"refused without reason", "pp2_refused", func(d *Descriptor) { d.Refusal = "" }, "no refusal reason"},
		{"refused but half registered", "pp2_refused", func(d *Descriptor) {
			d.RuntimeData = []RuntimeEntry{{Key: KeyHintCapability, Value: json.RawMessage("true")}}
		}, "carries hint runtime data"},
		{"refused with owners", "pp2_refused", func(d *Descriptor) { d.OwnerIDs[0] = DeriveOwnerID(EngineSGLang, "m", 16, "tcp://10.0.0.7:1", 0) }, "owners"},
		{"unknown worker type", "pp2_refused", func(d *Descriptor) { d.WorkerType = "agg" }, "worker_type"},
		{"bootstrap port on an aggregated worker", "pp2_refused", func(d *Descriptor) { d.BootstrapPort = 8998 }, "bootstrap_port"},
		{"SGLang prefill without a bootstrap port", "disagg_prefill", func(d *Descriptor) { d.BootstrapPort = 0 }, "bootstrap_port"},
		{"zero block size", "pp2_refused", func(d *Descriptor) { d.KVBlockSize = 0 }, "kv_block_size 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := buildCase(t, EngineSGLang, tt.base)
			if err := d.Validate(); err != nil {
				t.Fatalf("base %s invalid before mutation: %v", tt.base, err)
			}
			tt.mutate(d)
			err := d.Validate()
			if err == nil || !errors.Is(err, ErrInvalidDescriptor) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want ErrInvalidDescriptor mentioning %q", err, tt.want)
			}
		})
	}
}

// A loopback endpoint is valid only in a descriptor built for a single host.
func TestValidateSingleHost(t *testing.T) {
	d := buildCase(t, EngineSGLang, "single_host_loopback")
	if err := d.Validate(); err != nil {
		t.Fatalf("single-host descriptor: %v", err)
	}
	d.SingleHost = false
	if err := d.Validate(); !errors.Is(err, ErrInvalidDescriptor) || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("loopback endpoint without SingleHost: Validate() = %v", err)
	}
}

func TestCheckEventBlockSize(t *testing.T) {
	d := buildCase(t, EngineSGLang, "linker_tp1_full") // kv_block_size 16
	tests := []struct {
		name string
		ev   kvevents.Event
		ok   bool
	}{
		{"stored at the page size", kvevents.Event{Kind: kvevents.KindStored, BlockSize: 16}, true},
		{"stored at another size", kvevents.Event{Kind: kvevents.KindStored, BlockSize: 64}, false},
		{"runner-owned at another size", kvevents.Event{Kind: kvevents.KindStored, BlockSize: 1, Tier: kvevents.TierExternal, Ownership: kvevents.OwnedByRunner}, false},
		{"placeholder", kvevents.Event{Kind: kvevents.KindStored, Placeholder: true}, true},
		{"removal", kvevents.Event{Kind: kvevents.KindRemoved}, true},
		{"clear", kvevents.Event{Kind: kvevents.KindCleared}, true},
	}
	for _, tt := range tests {
		err := d.CheckEventBlockSize(&tt.ev)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrBlockSizeMismatch)) {
			t.Errorf("%s: %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

func TestParseEngine(t *testing.T) {
	for _, tt := range []struct {
		in string
		ok bool
	}{{"sglang", true}, {"vllm", true}, {"SGLang", false}, {"trtllm", false}, {"", false}} {
		_, err := ParseEngine(tt.in)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrInvalidConfig)) {
			t.Errorf("ParseEngine(%q) = %v, want ok=%v", tt.in, err, tt.ok)
		}
	}
	if _, err := Build("trtllm", []byte("{}"), Options{}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Build with an unknown engine: %v", err)
	}
}

// Without an injected reader an "@path" extra config is refused, never read
// behind the caller's back.
func TestExtraConfigFileNeedsReader(t *testing.T) {
	config := `{"model_path": "/m", "enable_unified_cache_external_linker": true,
		"unified_cache_external_linker_backend": "kvcr", "hicache_storage_backend_extra_config": "@/etc/x.json"}`
	_, err := FromSGLang([]byte(config), Options{})
	if err == nil || !strings.Contains(err.Error(), "reading files is not enabled") {
		t.Errorf("err = %v", err)
	}
}

func TestCanonicalRuntimeKey(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"kv_hint.transfer.v1", KeyHintCapability},
		{"kv_hint_transfer_worker_type", KeyWorkerType},
		{"kv_hint_transfer_source_control_endpoints", KeySourceControlEndpoints},
		{"router_hint", "router_hint"},
		{"router_hint_worker_type", "router_hint_worker_type"},
		{"other", "other"},
	} {
		if got := CanonicalRuntimeKey(tt.in); got != tt.want {
			t.Errorf("CanonicalRuntimeKey(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
