package direct

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"kvrouter/internal/hints"
	"kvrouter/internal/router"
)

func TestParseWorkerSpec(t *testing.T) {
	sg := hints.PlaceSGLangOld
	tests := []struct {
		in   string
		err  string
		want WorkerSpec
	}{
		{in: "url=http://10.0.0.5:8000", want: WorkerSpec{ID: "10.0.0.5:8000", url: "http://10.0.0.5:8000", blockSize: 16, dp: 1, tp: 1, engine: "vllm"}},
		{in: "url=http://h:1/,events=tcp://h:5557,replay=tcp://h:5558,block_size=64,dp=2,tp=4,type=decode,id=w1,model=m,engine=sglang,hint=sglang-old",
			want: WorkerSpec{ID: "w1", url: "http://h:1", events: "tcp://h:5557", replay: "tcp://h:5558", blockSize: 64, dp: 2, tp: 4,
				workerType: hints.TypeDecode, model: "m", engine: "sglang", placement: &sg}},
		{in: "url=http://h:1,engine=sglang,type=prefill",
			want: WorkerSpec{ID: "h:1", url: "http://h:1", blockSize: 16, dp: 1, tp: 1, workerType: hints.TypePrefill, engine: "sglang", bootstrapPort: 8998}},
		{in: "url=http://h:1,engine=sglang,type=prefill,bootstrap_port=9100",
			want: WorkerSpec{ID: "h:1", url: "http://h:1", blockSize: 16, dp: 1, tp: 1, workerType: hints.TypePrefill, engine: "sglang", bootstrapPort: 9100}},
		{in: "url=http://h:1,type=prefill,bootstrap_port=9100", err: "only an SGLang prefill engine"},
		{in: "url=http://h:1,engine=sglang,type=decode,bootstrap_port=9100", err: "only an SGLang prefill engine"},
		{in: "url=http://h:1,engine=sglang,type=prefill,bootstrap_port=70000", err: "bootstrap_port"},
		{in: "events=tcp://h:1", err: "url: want http://HOST:PORT"},
		{in: "url=ftp://h:1", err: "url: want"},
		{in: "url=http://h:1,events=tcp://*:5557", err: "events=tcp://*:5557: the engine binds there"},
		{in: "url=http://h:1,replay=tcp://h:2", want: WorkerSpec{ID: "h:1", url: "http://h:1", replay: "tcp://h:2", blockSize: 16, dp: 1, tp: 1, engine: "vllm"}},
		{in: "url=http://h:1,events=tcp://h:5557,snapshot=tcp://h:5559,engine=sglang",
			want: WorkerSpec{ID: "h:1", url: "http://h:1", events: "tcp://h:5557", snapshot: "tcp://h:5559", blockSize: 16, dp: 1, tp: 1, engine: "sglang"}},
		{in: "url=http://h:1,events=tcp://h:5557,snapshot=tcp://h:5559", err: "snapshot (SGLang's snapshot_endpoint) needs events and engine=sglang"},
		{in: "url=http://h:1,snapshot=tcp://h:5559,engine=sglang", err: "needs events"},
		{in: "url=http://h:1,events=tcp://h:5557,snapshot=tcp://*:5559,engine=sglang", err: "snapshot=tcp://*:5559: the engine binds there"},
		{in: "url=http://h:1,replay=tcp://*:2", err: "replay=tcp://*:2: the engine binds there"},
		{in: "url=http://h:1,dp=0", err: "dp: \"0\": want a positive integer"},
		{in: "url=http://h:1,engine=sglang,tp=0", err: "tp: \"0\": want a positive integer"},
		{in: "url=http://h:1,tp=2", err: "tp=2: engine=vllm reports one runner inventory"},
		{in: "url=http://h:1,block_size=x", err: "block_size"},
		{in: "url=http://h:1,type=both", err: "type"},
		{in: "url=http://h:1,engine=tgi", err: "engine"},
		{in: "url=http://h:1,hint=kvcr", err: "hint"},
		{in: "url=http://h:1,color=red", err: "unknown key"},
		{in: "url=http://h:1,url=http://h:2", err: "url given twice"},
		{in: "url", err: "want key=value"},
		{in: "url=http://h:1,dp=2,type=aggregated,control=tcp://h:25000;tcp://g:26000",
			want: WorkerSpec{ID: "h:1", url: "http://h:1", blockSize: 16, dp: 2, tp: 1, engine: "vllm", workerType: hints.TypeAggregated,
				control: []string{"tcp://h:25000", "tcp://g:26000"}}},
		// Rank 0's alone: the others by the attention-rank port rule.
		{in: "url=http://h:1,dp=3,tp=2,engine=sglang,type=decode,control=tcp://h:25000",
			want: WorkerSpec{ID: "h:1", url: "http://h:1", blockSize: 16, dp: 3, tp: 2, engine: "sglang", workerType: hints.TypeDecode,
				control: []string{"tcp://h:25000", "tcp://h:25002", "tcp://h:25004"}}},
		{in: "url=http://h:1,control=tcp://h:25000", err: "control: a hint source needs type="},
		{in: "url=http://h:1,type=aggregated,dp=3,control=tcp://h:1;tcp://h:2", err: "2 endpoints for dp=3"},
		{in: "url=http://h:1,type=aggregated,control=tcp://*:25000", err: "wildcard"},
		{in: "url=http://h:1,type=aggregated,control=http://h:25000", err: "want tcp://HOST:PORT"},
		{in: "url=http://h:1,type=aggregated,control=tcp://h", err: "want tcp://HOST:PORT"},
		{in: "url=http://h:1,type=aggregated,dp=2,control=tcp://h:65535", err: "out of range"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseWorkerSpec(tc.in)
			if tc.err != "" {
				if !errors.Is(err, errWorkerFlag) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v (%v)\nwant %+v", got, err, tc.want)
			}
		})
	}
}

// TestCheckSpecs: replay= without events= takes --events-bind, and one
// rank, whose publisher the topic names.
func TestCheckSpecs(t *testing.T) {
	tests := []struct {
		workers    []string
		eventsBind string
		err        string
	}{
		{[]string{"url=http://h:1,events=tcp://h:2,replay=tcp://h:3"}, "", ""},
		{[]string{"url=http://h:1,replay=tcp://h:3"}, "tcp://*:5557", ""},
		{[]string{"url=http://h:1", "url=http://h:2,replay=tcp://h:3"}, "", "h:2: replay=tcp://h:3 needs the engine's events: give events= (an engine that binds) or --events-bind"},
		{[]string{"url=http://h:1,replay=tcp://h:3,dp=2"}, "tcp://*:5557", "replay= with --events-bind needs dp=1 (dp=2)"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.workers, " "), func(t *testing.T) {
			var specs []WorkerSpec
			for _, w := range tc.workers {
				s, err := ParseWorkerSpec(w)
				if err != nil {
					t.Fatal(err)
				}
				specs = append(specs, s)
			}
			err := CheckSpecs(specs, tc.eventsBind)
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, errWorkerFlag) || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v, want one containing %q", err, tc.err)
			}
		})
	}
}

func TestWorkerSpecWorker(t *testing.T) {
	s, _ := ParseWorkerSpec("url=https://example.com")
	if s.hostPort() != "example.com:443" {
		t.Fatalf("host:port %q", s.hostPort())
	}
	w := s.worker("m", true)
	if w.Mode != router.ModeEvents || w.Owners[0] != flagOwner("example.com", 0) || w.Capability.CanConsume {
		t.Fatalf("worker %+v", w)
	}
	if w := s.worker("m", false); w.Mode != router.ModeApproximate || w.Owners != nil {
		t.Fatalf("approximate worker %+v", w)
	}
	s, _ = ParseWorkerSpec("url=http://h:1,engine=sglang,type=prefill")
	if w := s.worker("m", false); w.Role != hints.TypePrefill || w.BootstrapPort != 8998 {
		t.Fatalf("prefill worker %+v", w)
	}
	// control= makes each rank (and its runner's cache owner) a source.
	s, _ = ParseWorkerSpec("url=http://h:1,dp=2,type=aggregated,control=tcp://h:25000")
	w = s.worker("m", true)
	for r, want := range []string{"tcp://h:25000", "tcp://h:25001"} {
		if m := w.Capability.Meta(r); !m.CanConsume || m.Endpoint != want {
			t.Fatalf("rank %d: meta %+v, want endpoint %s", r, m, want)
		}
	}
}

// The runner prober asks every TP rank's runner of every DP rank: control=
// names each rank's TP rank 0, TP rank t binds its port + t.
func TestWorkerSpecRunnerTargets(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want string
	}{
		{"url=http://h:1,type=aggregated", ""},
		{"url=http://h:1,dp=2,type=aggregated,control=tcp://h:25000", "0/0 tcp://h:25000 1/0 tcp://h:25001"},
		{"url=http://h:1,dp=2,tp=2,engine=sglang,type=aggregated,control=tcp://h:25000",
			"0/0 tcp://h:25000 0/1 tcp://h:25001 1/0 tcp://h:25002 1/1 tcp://h:25003"},
		{"url=http://h:1,dp=2,type=decode,control=tcp://a:7;tcp://b:9", "0/0 tcp://a:7 1/0 tcp://b:9"},
	} {
		s, err := ParseWorkerSpec(tc.spec)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, tg := range s.runnerTargets() {
			got = append(got, fmt.Sprintf("%d/%d %s", tg.DP, tg.TP, tg.Endpoint))
		}
		if g := strings.Join(got, " "); g != tc.want {
			t.Errorf("%s: %q, want %q", tc.spec, g, tc.want)
		}
	}
}
