package direct

import (
	"errors"
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
		{in: "url=http://10.0.0.5:8000", want: WorkerSpec{ID: "10.0.0.5:8000", URL: "http://10.0.0.5:8000", BlockSize: 16, DP: 1, TP: 1, Engine: "vllm"}},
		{in: "url=http://h:1/,events=tcp://h:5557,replay=tcp://h:5558,block_size=64,dp=2,tp=4,type=decode,id=w1,model=m,engine=sglang,hint=sglang-old",
			want: WorkerSpec{ID: "w1", URL: "http://h:1", Events: "tcp://h:5557", Replay: "tcp://h:5558", BlockSize: 64, DP: 2, TP: 4,
				Type: hints.TypeDecode, Model: "m", Engine: "sglang", Placement: &sg}},
		{in: "events=tcp://h:1", err: "url: want http://HOST:PORT"},
		{in: "url=ftp://h:1", err: "url: want"},
		{in: "url=http://h:1,events=tcp://*:5557", err: "events=tcp://*:5557: the engine binds there"},
		{in: "url=http://h:1,replay=tcp://h:2", want: WorkerSpec{ID: "h:1", URL: "http://h:1", Replay: "tcp://h:2", BlockSize: 16, DP: 1, TP: 1, Engine: "vllm"}},
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
}
