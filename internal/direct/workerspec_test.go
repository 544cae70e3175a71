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
		{in: "url=http://10.0.0.5:8000", want: WorkerSpec{ID: "10.0.0.5:8000", url: "http://10.0.0.5:8000", blockSize: 16, dp: 1, tp: 1, engine: "vllm"}},
		{in: "url=http://h:1/,events=tcp://h:5557,replay=tcp://h:5558,block_size=64,dp=2,tp=4,type=decode,id=w1,model=m,engine=sglang,hint=sglang-old",
			want: WorkerSpec{ID: "w1", url: "http://h:1", events: "tcp://h:5557", replay: "tcp://h:5558", blockSize: 64, dp: 2, tp: 4,
				workerType: hints.TypeDecode, model: "m", engine: "sglang", placement: &sg}},
		{in: "events=tcp://h:1", err: "url: want http://HOST:PORT"},
		{in: "url=ftp://h:1", err: "url: want"},
		{in: "url=http://h:1,events=tcp://*:5557", err: "events=tcp://*:5557: the engine binds there"},
		{in: "url=http://h:1,replay=tcp://h:2", want: WorkerSpec{ID: "h:1", url: "http://h:1", replay: "tcp://h:2", blockSize: 16, dp: 1, tp: 1, engine: "vllm"}},
		{in: "url=http://h:1,events=tcp://h:5557,snapshot=tcp://h:5559,engine=sglang",
			want: WorkerSpec{ID: "h:1", url: "http://h:1", events: "tcp://h:5557", snapshot: "tcp://h:5559", blockSize: 16, dp: 1, tp: 1, engine: "sglang"}},
		{in: "url=http://h:1,events=tcp://h:5557,snapshot=tcp://h:5559", err: "snapshot (SGLang's snapshot_endpoint) needs events and engine=sglang"},
		{in: "url=http://h:1,snapshot=tcp://h:5559,engine=sglang", err: "needs events"},
		{in: "url=http://h:1,events=tcp://h:5557,snapshot=tcp://*:5559,engine=sglang", err: "snapshot=tcp://*:5559: the engine binds there"},
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
