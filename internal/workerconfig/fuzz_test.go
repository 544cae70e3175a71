package workerconfig

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// addCaseSeeds adds every data-driven case's configuration as a seed.
func addCaseSeeds(f *testing.F, engine Engine) {
	files, _ := filepath.Glob(filepath.Join("testdata", string(engine), "*.json"))
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		var c caseFile
		if err := json.Unmarshal(raw, &c); err != nil {
			f.Fatal(err)
		}
		if c.ConfigText != nil {
			f.Add([]byte(*c.ConfigText))
		} else {
			f.Add([]byte(c.Config))
		}
	}
}

// fuzzResolve stands in for DNS: deterministic, and loopback for one name.
func fuzzResolve(host string) ([]string, error) {
	if host == "worker-0" {
		return []string{"127.0.1.1"}, nil
	}
	return []string{"10.0.0.1"}, nil
}

func checkBuilt(t *testing.T, d *Descriptor, err error) {
	if err != nil {
		if !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("error outside ErrInvalidConfig (an internal inconsistency): %v", err)
		}
		return
	}
	if err := d.Validate(); err != nil {
		t.Fatalf("built descriptor fails Validate: %v", err)
	}
	if _, err := json.Marshal(d); err != nil {
		t.Fatalf("descriptor does not marshal: %v", err)
	}
}

func FuzzFromSGLang(f *testing.F) {
	f.Add([]byte(`{"model_path":"m","enable_unified_cache_external_linker":true,"unified_cache_external_linker_backend":"kvcr","hicache_storage_backend_extra_config":{"control_port":25000,"advertise_host":"10.0.0.7","enable_remote_hint":true,"publish_inventory":true,"kvcr_service_socket_path":null},"kv_events_config":"{\"publisher\":\"zmq\"}"}`))
	f.Add([]byte(`{"model_path":"m","tp_size":8,"dp_size":4,"enable_dp_attention":true}`))
	addCaseSeeds(f, EngineSGLang)
	opt := Options{Resolve: fuzzResolve, ReadFile: func(string) ([]byte, error) { return []byte(`{"control_port": 1}`), nil }}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := FromSGLang(data, opt)
		checkBuilt(t, d, err)
	})
}

func FuzzFromVLLM(f *testing.F) {
	f.Add([]byte(`{"model":"m","data_parallel_size":2,"kv_transfer_config":{"kv_connector_extra_config":{"secondary_tiers":[{"router_capabilities":["router_hint"],"control_advertise_host":"fd00::1","control_ports":[1,2]}]}},"kv_events_config":{"enable_kv_cache_events":true}}`))
	addCaseSeeds(f, EngineVLLM)
	opt := Options{Resolve: fuzzResolve}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := FromVLLM(data, opt)
		checkBuilt(t, d, err)
	})
}

// FuzzParseZMQ: an accepted endpoint prints back to itself after one
// normalising round, and its offset forms parse too.
func FuzzParseZMQ(f *testing.F) {
	for _, s := range []string{"tcp://*:5557", "tcp://[::]:5557", "tcp://10.0.0.9:1", "ipc:///tmp/x", "inproc://x", "tcp://[fd00::1]:65535", "tcp://h:0"} {
		f.Add(s, 0)
		f.Add(s, 3)
	}
	f.Fuzz(func(t *testing.T, s string, rank int) {
		e, err := parseZMQ(s, "opt")
		if err != nil {
			return
		}
		again, err := parseZMQ(e.String(), "opt")
		if err != nil || again.String() != e.String() {
			t.Fatalf("%q -> %q does not round trip: %v", s, e.String(), err)
		}
		if rank < 0 || rank >= maxCount {
			return
		}
		if off, err := e.offset(rank, "opt"); err == nil && off.scheme == schemeTCP {
			if _, err := parseZMQ(off.String(), "opt"); err != nil {
				t.Fatalf("offset %q of %q does not parse: %v", off.String(), s, err)
			}
		}
	})
}

// FuzzPeerHost: an accepted host yields a tcp:// endpoint that parses, and
// its host is itself acceptable, with and without AllowLoopback; what is
// accepted without it is accepted with it.
func FuzzPeerHost(f *testing.F) {
	for _, s := range []string{"10.0.0.7", "fd00::1", "[fd00::1]", "node-7.local", "localhost", "0.0.0.0", "::ffff:127.0.0.1", "a:1", "fe80::1%eth0", "worker-0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		strict := ""
		for _, allow := range []bool{false, true} {
			urlHost, _, err := peerHost(s, "opt", "set opt", fuzzResolve, allow)
			if err != nil {
				if !errors.Is(err, ErrUndialableHost) {
					t.Fatalf("%q: error outside ErrUndialableHost: %v", s, err)
				}
				if allow && strict != "" {
					t.Fatalf("%q accepted without AllowLoopback but refused with it: %v", s, err)
				}
				continue
			}
			if !allow {
				strict = urlHost
			}
			ep := schemeTCP + urlHost + ":25000"
			if err := checkAdvertised(ep, allow); err != nil {
				t.Fatalf("%q accepted but %s is not advertisable: %v", s, ep, err)
			}
			if again, problem := checkHost(urlHost, allow); problem != "" || again != urlHost {
				t.Fatalf("%q -> %q is not stable: %q %q", s, urlHost, again, problem)
			}
		}
	})
}
