package kvstream

import (
	"errors"
	"testing"
)

func TestBinds(t *testing.T) {
	tests := []struct {
		endpoint string
		want     bool
	}{
		{"tcp://*:5557", true},
		{"tcp://0.0.0.0:5557", true},
		{"tcp://[::]:5557", true},
		{"tcp://[::1]:5557", true}, // the engines' substring test, kept
		{"ipc:///tmp/kv.sock", true},
		{"inproc://kv", true},
		{"tcp://10.1.2.3:5557", false},
		{"tcp://router.svc:5557", false},
		{"tcp://localhost:5557", false},
	}
	for _, tc := range tests {
		if got := Binds(tc.endpoint); got != tc.want {
			t.Errorf("Binds(%q) = %v, want %v", tc.endpoint, got, tc.want)
		}
	}
}

func TestDialAddress(t *testing.T) {
	tests := []struct {
		endpoint, host, want string
		err                  bool
	}{
		{"tcp://*:5557", "10.0.0.5", "tcp://10.0.0.5:5557", false},
		{"tcp://0.0.0.0:5557", "node-1", "tcp://node-1:5557", false},
		{"tcp://[::]:5557", "fd00::5", "tcp://[fd00::5]:5557", false},
		{"tcp://:5557", "h", "tcp://h:5557", false},
		{"tcp://10.1.2.3:5557", "other", "tcp://10.1.2.3:5557", false},
		{"ipc:///tmp/kv.sock", "h", "ipc:///tmp/kv.sock", false},
		{"inproc://kv", "h", "inproc://kv", false},
		{"tcp://*:5557", "", "", true},
		{"tcp://*", "h", "", true},
		{"udp://h:1", "h", "", true},
	}
	for _, tc := range tests {
		got, err := DialAddress(tc.endpoint, tc.host)
		if tc.err {
			if !errors.Is(err, ErrEndpoint) {
				t.Errorf("DialAddress(%q, %q) error %v, want ErrEndpoint", tc.endpoint, tc.host, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("DialAddress(%q, %q) = %q, %v; want %q", tc.endpoint, tc.host, got, err, tc.want)
		}
	}
}

func TestEndpointForRank(t *testing.T) {
	tests := []struct {
		endpoint string
		rank     int
		want     string
		err      bool
	}{
		{"tcp://*:5557", 0, "tcp://*:5557", false},
		{"tcp://*:5557", 3, "tcp://*:5560", false},
		{"tcp://[::]:5557", 1, "tcp://[::]:5558", false},
		{"tcp://10.0.0.1:5558", 2, "tcp://10.0.0.1:5560", false},
		{"inproc://cache", 0, "inproc://cache", false},
		{"inproc://cache", 2, "inproc://cache_dp2", false},
		{"ipc:///tmp/kv.sock", 1, "ipc:///tmp/kv.sock_dp1", false},
		{"tcp://*:65535", 0, "tcp://*:65535", false},
		{"tcp://*:65535", 1, "", true},
		{"tcp://*:5557", -1, "", true},
		{"tcp://host", 1, "", true},
		{"tcp://*:port", 1, "", true},
		{"udp://*:5557", 1, "", true},
	}
	for _, tc := range tests {
		got, err := EndpointForRank(tc.endpoint, tc.rank)
		if tc.err {
			if !errors.Is(err, ErrEndpoint) {
				t.Errorf("EndpointForRank(%q, %d) error %v, want ErrEndpoint", tc.endpoint, tc.rank, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("EndpointForRank(%q, %d) = %q, %v; want %q", tc.endpoint, tc.rank, got, err, tc.want)
		}
	}
}
