package workerconfig

import (
	"errors"
	"strings"
	"testing"
)

func TestHostProblem(t *testing.T) {
	tests := []struct {
		raw     string
		urlHost string // when valid
		problem string // substring when invalid
	}{
		{raw: "10.0.0.7", urlHost: "10.0.0.7"},
		{raw: "fd00::1", urlHost: "[fd00::1]"},
		{raw: "[fd00::1]", urlHost: "[fd00::1]"},
		{raw: "FD00:0:0::1", urlHost: "[fd00::1]"},
		{raw: "::ffff:10.0.0.7", urlHost: "10.0.0.7"},
		{raw: "node-7.cluster.local", urlHost: "node-7.cluster.local"},
		{raw: "node-7.cluster.local.", urlHost: "node-7.cluster.local."},
		{raw: "gpu_node_3", urlHost: "gpu_node_3"},
		{raw: "", problem: "empty"},
		{raw: "*", problem: "wildcard"},
		{raw: "0.0.0.0", problem: "unspecified"},
		{raw: "::", problem: "unspecified"},
		{raw: "[::]", problem: "unspecified"},
		{raw: "127.0.0.1", problem: "loopback"},
		{raw: "127.8.9.10", problem: "loopback"},
		{raw: "::1", problem: "loopback"},
		{raw: "::ffff:127.0.0.1", problem: "loopback"},
		{raw: "localhost", problem: "loopback"},
		{raw: "LocalHost.", problem: "loopback"},
		{raw: "api.localhost", problem: "loopback"},
		{raw: "224.0.0.1", problem: "multicast"},
		{raw: "fe80::1%eth0", problem: "zone"},
		{raw: "tcp://10.0.0.7", problem: "scheme"},
		{raw: "10.0.0.7:25000", problem: "port"},
		{raw: "node:25000", problem: "port"},
		{raw: "[fd00::1]:25000", problem: "port"},
		{raw: "[fd00::1", problem: "unclosed"},
		{raw: "[10.0.0.7]", problem: "only for IPv6"},
		{raw: "fd00::1::2", problem: "not a valid IPv6"},
		{raw: "10.0.0.7/24", problem: "path"},
		{raw: "user@host", problem: "not a host"},
		{raw: "a b", problem: "whitespace"},
		{raw: "-bad.example", problem: "not a valid host name"},
		{raw: "a..b", problem: "not a valid host name"},
		{raw: "300.1.1.1", problem: "IPv4"},
		{raw: strings.Repeat("a", 64), problem: "not a valid host name"},
	}
	for _, tt := range tests {
		urlHost, problem := hostProblem(tt.raw)
		if tt.problem == "" {
			if problem != "" || urlHost != tt.urlHost {
				t.Errorf("hostProblem(%q) = %q, %q; want %q, no problem", tt.raw, urlHost, problem, tt.urlHost)
			}
			continue
		}
		if !strings.Contains(problem, tt.problem) {
			t.Errorf("hostProblem(%q) problem %q, want one mentioning %q", tt.raw, problem, tt.problem)
		}
	}
}

func TestPeerHostResolver(t *testing.T) {
	calls := 0
	lookup := func(host string) ([]string, error) {
		calls++
		switch host {
		case "lo.example":
			return []string{"10.0.0.1", "127.0.0.2"}, nil
		case "any.example":
			return []string{"0.0.0.0"}, nil
		case "odd.example":
			return []string{"not-an-ip", "10.0.0.3"}, nil
		case "ok.example":
			return []string{"10.0.0.4"}, nil
		}
		return nil, errors.New("no such host")
	}
	tests := []struct {
		host    string
		err     string
		warning string
	}{
		{host: "ok.example"},
		{host: "odd.example"},
		{host: "lo.example", err: "resolves to 127.0.0.2"},
		{host: "any.example", err: "resolves to 0.0.0.0"},
		{host: "gone.example", warning: "does not resolve"},
	}
	for _, tt := range tests {
		_, warning, err := peerHost(tt.host, "opt", "set opt", lookup, false)
		switch {
		case tt.err != "":
			if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), "set opt") || !errors.Is(err, ErrUndialableHost) {
				t.Errorf("%s: err %v, want one containing %q and the guidance", tt.host, err, tt.err)
			}
		case err != nil:
			t.Errorf("%s: unexpected error %v", tt.host, err)
		case !strings.Contains(warning, tt.warning) || (tt.warning == "" && warning != ""):
			t.Errorf("%s: warning %q, want %q", tt.host, warning, tt.warning)
		}
	}
	// Literals never reach the resolver.
	calls = 0
	for _, h := range []string{"10.0.0.9", "fd00::9", "[fd00::9]"} {
		if _, _, err := peerHost(h, "opt", "", lookup, false); err != nil {
			t.Errorf("%s: %v", h, err)
		}
	}
	if calls != 0 {
		t.Errorf("resolver called %d times for IP literals", calls)
	}
}

func TestZMQEndpoints(t *testing.T) {
	tests := []struct {
		in       string
		rank     int
		binds    bool
		offset   string // after the rank offset
		dialable string // with dial host 10.0.0.7
		err      string
	}{
		{in: "tcp://*:5557", rank: 0, binds: true, offset: "tcp://*:5557", dialable: "tcp://10.0.0.7:5557"},
		{in: "tcp://*:5557", rank: 3, binds: true, offset: "tcp://*:5560", dialable: "tcp://10.0.0.7:5560"},
		{in: "tcp://0.0.0.0:5557", rank: 1, binds: true, offset: "tcp://0.0.0.0:5558", dialable: "tcp://10.0.0.7:5558"},
		{in: "tcp://[::]:5557", rank: 1, binds: true, offset: "tcp://[::]:5558", dialable: "tcp://10.0.0.7:5558"},
		{in: "tcp://[fd00::9]:5557", rank: 1, binds: true, offset: "tcp://[fd00::9]:5558", dialable: "tcp://[fd00::9]:5558"},
		{in: "tcp://10.0.0.9:5557", rank: 2, binds: false, offset: "tcp://10.0.0.9:5559", dialable: "tcp://10.0.0.9:5559"},
		{in: "tcp://eth0:5557", rank: 0, binds: false, offset: "tcp://eth0:5557", dialable: "tcp://eth0:5557"},
		{in: "ipc:///tmp/kv", rank: 0, binds: true, offset: "ipc:///tmp/kv", dialable: "ipc:///tmp/kv"},
		{in: "inproc://kv", rank: 2, binds: true, offset: "inproc://kv_dp2", dialable: "inproc://kv_dp2"},
		{in: "ipc:///tmp/kv", rank: 1, err: "cannot be offset"},
		{in: "tcp://*:65535", rank: 1, err: "exceeds 65535"},
		{in: "tcp://*", err: "needs a port"},
		{in: "tcp://*:0", err: "1..65535"},
		{in: "tcp://*:x", err: "1..65535"},
		{in: "tcp://fd00::1:5557", err: "brackets"},
		{in: "tcp://[10.0.0.1]:5557", err: "not an IPv6"},
		{in: "tcp://a;b:5557", err: "not a host"},
		{in: "ipc://", err: "names no address"},
		{in: "http://x:1", err: "must start with"},
	}
	for _, tt := range tests {
		e, err := parseZMQ(tt.in, "opt")
		if err == nil {
			e, err = e.offset(tt.rank, "opt")
		}
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s rank %d: err %v, want %q", tt.in, tt.rank, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s rank %d: %v", tt.in, tt.rank, err)
			continue
		}
		if got := publisherBinds(EngineSGLang, tt.in); got != tt.binds {
			t.Errorf("publisherBinds(sglang, %s) = %v, want %v", tt.in, got, tt.binds)
		}
		if got := e.String(); got != tt.offset {
			t.Errorf("%s rank %d: %s, want %s", tt.in, tt.rank, got, tt.offset)
		}
		if got := e.dialable("10.0.0.7").String(); got != tt.dialable {
			t.Errorf("%s rank %d dialable: %s, want %s", tt.in, tt.rank, got, tt.dialable)
		}
	}
}

// The engines disagree on 0.0.0.0: newer SGLang binds it, vLLM connects to
// it. Both match the text as written, so "0.0.0.0" inside another address
// counts too.
func TestPublisherBindsByEngine(t *testing.T) {
	tests := []struct {
		in           string
		sglang, vllm bool
	}{
		{in: "tcp://*:5557", sglang: true, vllm: true},
		{in: "tcp://[::]:5557", sglang: true, vllm: true},
		{in: "tcp://[fd00::9]:5557", sglang: true, vllm: true},
		{in: "tcp://0.0.0.0:5557", sglang: true, vllm: false},
		{in: "tcp://10.0.0.0:5557", sglang: true, vllm: false},
		{in: "tcp://10.0.0.9:5557", sglang: false, vllm: false},
		{in: "tcp://[0:0:0:0:0:0:0:0]:5557", sglang: false, vllm: false},
		{in: "ipc:///tmp/kv", sglang: true, vllm: true},
		{in: "inproc://kv", sglang: true, vllm: true},
	}
	for _, tt := range tests {
		if got := publisherBinds(EngineSGLang, tt.in); got != tt.sglang {
			t.Errorf("publisherBinds(sglang, %s) = %v, want %v", tt.in, got, tt.sglang)
		}
		if got := publisherBinds(EngineVLLM, tt.in); got != tt.vllm {
			t.Errorf("publisherBinds(vllm, %s) = %v, want %v", tt.in, got, tt.vllm)
		}
	}
}

// With AllowLoopback exactly the loopback refusals turn into acceptances;
// every other problem stays.
func TestCheckHostAllowLoopback(t *testing.T) {
	tests := []struct {
		raw     string
		urlHost string // accepted with AllowLoopback
		problem string // refused even with AllowLoopback
	}{
		{raw: "127.0.0.1", urlHost: "127.0.0.1"},
		{raw: "127.8.9.10", urlHost: "127.8.9.10"},
		{raw: "::1", urlHost: "[::1]"},
		{raw: "[::1]", urlHost: "[::1]"},
		{raw: "::ffff:127.0.0.1", urlHost: "127.0.0.1"},
		{raw: "localhost", urlHost: "localhost"},
		{raw: "api.localhost", urlHost: "api.localhost"},
		{raw: "10.0.0.7", urlHost: "10.0.0.7"},
		{raw: "*", problem: "wildcard"},
		{raw: "0.0.0.0", problem: "unspecified"},
		{raw: "[::]", problem: "unspecified"},
		{raw: "127.0.0.1:25000", problem: "port"},
		{raw: "tcp://127.0.0.1", problem: "scheme"},
		{raw: "", problem: "empty"},
	}
	for _, tt := range tests {
		urlHost, problem := checkHost(tt.raw, true)
		if tt.problem != "" {
			if !strings.Contains(problem, tt.problem) {
				t.Errorf("checkHost(%q, true) problem %q, want one mentioning %q", tt.raw, problem, tt.problem)
			}
			continue
		}
		if problem != "" || urlHost != tt.urlHost {
			t.Errorf("checkHost(%q, true) = %q, %q; want %q", tt.raw, urlHost, problem, tt.urlHost)
		}
		if _, strict := checkHost(tt.raw, false); tt.raw != "10.0.0.7" && !strings.Contains(strict, "loopback") {
			t.Errorf("checkHost(%q, false) problem %q, want loopback", tt.raw, strict)
		}
	}
}

func TestPeerHostResolverAllowLoopback(t *testing.T) {
	lookup := func(host string) ([]string, error) {
		switch host {
		case "lo.example":
			return []string{"10.0.0.1", "127.0.0.2"}, nil
		case "any.example":
			return []string{"::"}, nil
		}
		return nil, errors.New("no such host")
	}
	if h, _, err := peerHost("lo.example", "opt", "set opt", lookup, true); err != nil || h != "lo.example" {
		t.Errorf("lo.example with AllowLoopback: %q, %v", h, err)
	}
	if _, _, err := peerHost("any.example", "opt", "set opt", lookup, true); err == nil || !strings.Contains(err.Error(), "resolves to ::") {
		t.Errorf("any.example with AllowLoopback: err %v, want resolves to ::", err)
	}
}
