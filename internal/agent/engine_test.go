package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"kvrouter/internal/kvstream"
	"kvrouter/internal/workerconfig"
)

var fastRetry = kvstream.Backoff{Min: time.Millisecond, Max: 5 * time.Millisecond}

func TestFetchConfig(t *testing.T) {
	tests := []struct {
		name    string
		engine  workerconfig.Engine
		answers []int // status of each request; the last repeats
		wait    time.Duration
		want    string // body, or
		err     string // error substring
		calls   int    // requests made, when the answer is final
	}{
		{name: "sglang up", engine: sglang, answers: []int{200}, want: "cfg", calls: 1},
		{name: "vllm path", engine: vllm, answers: []int{200}, want: "cfg", calls: 1},
		{name: "starting engine", engine: sglang, answers: []int{503, 502, 500, 200}, want: "cfg", calls: 4},
		{name: "wrong engine or path", engine: sglang, answers: []int{404}, err: "check --engine", calls: 1},
		{name: "refused", engine: sglang, answers: []int{503, 403}, err: "403", calls: 2},
		{name: "never up", engine: vllm, answers: []int{503}, wait: 30 * time.Millisecond, err: "--engine-wait"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != configPath(tt.engine) {
					t.Errorf("path %s", r.URL.Path)
				}
				n := int(calls.Add(1)) - 1
				code := tt.answers[min(n, len(tt.answers)-1)]
				w.WriteHeader(code)
				io.WriteString(w, "cfg")
			}))
			defer srv.Close()
			body, err := fetchConfig(context.Background(), srv.Client(), tt.engine, srv.URL, tt.wait, fastRetry, quiet())
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, ErrEngineConfig) {
					t.Fatalf("err %v, want ErrEngineConfig mentioning %q", err, tt.err)
				}
			} else if err != nil || string(body) != tt.want {
				t.Fatalf("got %q, %v", body, err)
			}
			if tt.calls > 0 && int(calls.Load()) != tt.calls {
				t.Fatalf("%d requests, want %d", calls.Load(), tt.calls)
			}
		})
	}
}

// An engine not listening at all yet is retried like a 503.
func TestFetchConfigEngineNotListening(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, err = fetchConfig(context.Background(), http.DefaultClient, sglang, "http://"+addr, 30*time.Millisecond, fastRetry, quiet())
	if !errors.Is(err, ErrEngineConfig) || !strings.Contains(err.Error(), "--engine-wait") || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("err %v, want the wait spent on refused connections", err)
	}
}

func TestEngineHostPort(t *testing.T) {
	tests := []struct{ in, want, err string }{
		{in: "http://10.0.0.7:30000", want: "10.0.0.7:30000"},
		{in: "http://10.0.0.7:30000/", want: "10.0.0.7:30000"},
		{in: "https://[fd00::7]:8000", want: "[fd00::7]:8000"},
		{in: "http://worker-3:8000", want: "worker-3:8000"},
		{in: "10.0.0.7:30000", err: "--engine-url"},
		{in: "http://10.0.0.7", err: "HOST:PORT"},
		{in: "tcp://10.0.0.7:5557", err: "HOST:PORT"},
		{in: "http://10.0.0.7:30000/v1", err: "without a path"},
		{in: "", err: "--engine-url"},
	}
	for _, tt := range tests {
		got, err := engineHostPort(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: err %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%q: %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestLiveness(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	type obs struct {
		ok       bool
		ms       int
		changed  bool
		up       bool
		describe string
	}
	steps := []obs{
		{ok: true, ms: 0, up: true, describe: "healthy"},
		{ok: false, ms: 100, up: true, describe: "first failure starts the grace period"},
		{ok: false, ms: 900, up: true, describe: "still within grace"},
		{ok: true, ms: 1000, up: true, describe: "a success ends the failing streak"},
		{ok: false, ms: 1100, up: true, describe: "a new streak starts"},
		{ok: false, ms: 2099, up: true, describe: "just below grace"},
		{ok: false, ms: 2100, changed: true, up: false, describe: "grace spent: down"},
		{ok: false, ms: 9000, up: false, describe: "stays down, no repeated change"},
		{ok: true, ms: 9100, changed: true, up: true, describe: "first success: up"},
		{ok: true, ms: 9200, up: true, describe: "stays up"},
	}
	l := liveness{grace: time.Second}
	for _, s := range steps {
		changed, up := l.observe(s.ok, at(s.ms))
		if changed != s.changed || up != s.up {
			t.Fatalf("%s: changed %v up %v, want %v %v", s.describe, changed, up, s.changed, s.up)
		}
	}
}

func TestNewChecksOptions(t *testing.T) {
	base := Config{Engine: sglang, EngineURL: "http://10.0.0.7:30000", NATSURL: "nats://n:4222", Lease: DefaultLease, NATSTimeout: time.Second}
	tests := []struct {
		name   string
		change func(*Config)
		err    string
	}{
		{"ok", func(*Config) {}, ""},
		{"embedded", func(c *Config) { c.NATSURL, c.EmbeddedNATS = "", true }, ""},
		{"engine", func(c *Config) { c.Engine = "trtllm" }, "--engine"},
		{"engine url", func(c *Config) { c.EngineURL = "10.0.0.7" }, "--engine-url"},
		{"no nats", func(c *Config) { c.NATSURL = "" }, "--nats is required"},
		{"both nats", func(c *Config) { c.EmbeddedNATS = true }, "--embedded-nats"},
		{"short lease", func(c *Config) { c.Lease = 500 * time.Millisecond }, "--lease"},
		{"nats timeout", func(c *Config) { c.NATSTimeout = 0 }, "--nats-timeout"},
		{"grace", func(c *Config) { c.EngineGrace = -1 }, "--engine-grace"},
	}
	for _, tt := range tests {
		cfg := base
		tt.change(&cfg)
		a, err := New(cfg)
		if tt.err == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
			} else if a.cfg.WorkerID != "10.0.0.7:30000" {
				t.Errorf("%s: worker id %q, want the engine's host:port", tt.name, a.cfg.WorkerID)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%s: err %v, want one naming %q", tt.name, err, tt.err)
		}
	}
}

// A configuration that cannot run as written stops the agent before it
// registers anything, naming the option to fix.
func TestRunRefusesHardConfigErrors(t *testing.T) {
	e := startEngine(t, sglang, "sglang_linker_tp1", 0)
	b := openBus(t)
	cfg := agentConfig(e, b)
	cfg.SingleHost = false // 127.0.0.1 is then undialable by peers
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = a.Run(context.Background())
	if !errors.Is(err, workerconfig.ErrUndialableHost) || !strings.Contains(err.Error(), "advertise_host") {
		t.Fatalf("err %v, want ErrUndialableHost naming advertise_host", err)
	}

	cfg.SingleHost, cfg.ConfigFile = true, "engine.json"
	cfg.ReadFile = func(string) ([]byte, error) { return []byte(`{"model_path": "m", "page_size": true}`), nil }
	a, _ = New(cfg)
	if err := a.Run(context.Background()); !errors.Is(err, workerconfig.ErrInvalidConfig) || !strings.Contains(err.Error(), "page_size") {
		t.Fatalf("err %v, want ErrInvalidConfig naming page_size", err)
	}
}

func TestRunNATSUnreachable(t *testing.T) {
	e := startEngine(t, sglang, "sglang_linker_tp1", 0)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "nats://" + l.Addr().String()
	l.Close()
	cfg := Config{Engine: sglang, EngineURL: e.srv.URL, SingleHost: true, DPStart: -1, NATSURL: url,
		NATSTimeout: 50 * time.Millisecond, Lease: time.Second, Backoff: fastRetry, Logger: quiet()}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = a.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "--nats") || !strings.Contains(err.Error(), url) {
		t.Fatalf("err %v, want one naming --nats and %s", err, url)
	}
}

func TestMetricsAndHealth(t *testing.T) {
	e := startEngine(t, sglang, "sglang_linker_tp1", 0)
	b := openBus(t)
	c := startCluster(t, e, b, func(cfg *Config) { cfg.MetricsListen = "127.0.0.1:0"; cfg.EngineGrace = time.Hour })
	addr := <-c.agent.MetricsAddr()
	c.subscribed()
	e.publish("", e.ev("store", false, "A"))
	get := func(path string) (int, string) {
		resp, err := http.Get(fmt.Sprintf("http://%s%s", addr, path))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	eventually(t, "the batch counted", func() bool {
		_, body := get("/metrics")
		return strings.Contains(body, "kvrouter_agent_index_blocks 1")
	})
	_, body := get("/metrics")
	for _, want := range []string{
		"kvrouter_agent_engine_batches_total ",
		"kvrouter_agent_engine_events_total 1",
		`kvrouter_agent_published_messages_total{kind="ops"} 1`,
		fmt.Sprintf(`kvrouter_agent_source_ready{source=%q} 1`, c.worker.String()),
		`kvrouter_agent_stream_total{counter="received",dp_rank="0"}`,
		`kvrouter_agent_batches_rejected_total{reason="block_size"} 0`,
		"kvrouter_agent_nats_connected 1",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	code, body := get("/healthz")
	var h struct {
		Registered bool            `json:"registered"`
		Ready      map[string]bool `json:"ready"`
	}
	if err := json.Unmarshal([]byte(body), &h); err != nil || code != 200 || !h.Registered || !h.Ready[c.worker.String()] {
		t.Fatalf("healthz %d %s (%v)", code, body, err)
	}
}
