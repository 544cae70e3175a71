package mocker

import (
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"kvrouter/internal/runner"
	"kvrouter/internal/workerconfig"
)

func getBody(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d", url, resp.StatusCode)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestConfigAcceptedByStateAgent: the configuration the engine serves is
// one the state agent accepts as a hint-capable worker, with the runner
// endpoints and event endpoints the engine really binds.
func TestConfigAcceptedByStateAgent(t *testing.T) {
	// workerconfig refuses loopback advertise hosts unless told the
	// deployment is single-host; the private address is advertised while
	// the runners bind loopback.
	const private = "10.1.2.3"
	cases := []struct {
		name   string
		flavor Flavor
		dp, tp int
		host   string
		mode   workerconfig.RunnerMode
	}{
		{"sglang tp1", SGLang, 1, 1, private, workerconfig.RunnerLinker},
		{"sglang tp2", SGLang, 1, 2, private, workerconfig.RunnerLinker},
		{"sglang dp2", SGLang, 2, 1, private, workerconfig.RunnerLinker},
		{"sglang dp2 tp2", SGLang, 2, 2, private, workerconfig.RunnerLinker},
		{"sglang loopback", SGLang, 1, 1, "127.0.0.1", workerconfig.RunnerLinker},
		{"vllm tp1", VLLM, 1, 1, private, workerconfig.RunnerSecondaryTier},
		{"vllm dp2", VLLM, 2, 1, private, workerconfig.RunnerSecondaryTier},
		{"vllm loopback", VLLM, 1, 1, "127.0.0.1", workerconfig.RunnerSecondaryTier},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			host := c.host
			e := startEngine(t, func(cfg *Config) {
				cfg.Flavor, cfg.DP, cfg.TP = c.flavor, c.dp, c.tp
				cfg.AdvertiseHost, cfg.ControlHost = host, "127.0.0.1"
				cfg.Topic = "kv-events"
			})
			path, from := pathServerInfo, workerconfig.FromSGLang
			if c.flavor == VLLM {
				path, from = pathEngineArgs, workerconfig.FromVLLM
			}
			info := getBody(t, e.URL()+path)
			opt := workerconfig.Options{AllowLoopback: host != private}
			if opt.AllowLoopback {
				if _, err := from(info, workerconfig.Options{}); !errors.Is(err, workerconfig.ErrUndialableHost) {
					t.Fatalf("loopback accepted without AllowLoopback: %v", err)
				}
			}
			d, err := from(info, opt)
			if err != nil {
				t.Fatal(err)
			}
			if !d.HintCapable || d.RunnerMode != c.mode || d.KVBlockSize != 64 || d.WorkerType != workerconfig.WorkerAggregated {
				t.Fatalf("descriptor: capable %v (%s) mode %s block %d type %s", d.HintCapable, d.Refusal, d.RunnerMode, d.KVBlockSize, d.WorkerType)
			}
			if !slices.Equal(d.DPRanks, seq(c.dp)) || len(d.Events) != c.dp || len(d.SourceControl) != c.dp {
				t.Fatalf("ranks %v, %d event endpoints, %d control endpoints", d.DPRanks, len(d.Events), len(d.SourceControl))
			}
			for i := range c.dp {
				if d.SourceControl[i].Endpoint != e.ControlEndpoint(i) {
					t.Errorf("rank %d control endpoint %s, engine binds %s", i, d.SourceControl[i].Endpoint, e.ControlEndpoint(i))
				}
				if c.flavor == SGLang {
					var want []string
					for tp := range c.tp {
						want = append(want, "tcp://"+host+":"+strconv.Itoa(e.cfg.controlPort(i, tp)))
					}
					if !slices.Equal(d.SourceControl[i].TPEndpoints, want) {
						t.Errorf("rank %d TP endpoints %v, want %v", i, d.SourceControl[i].TPEndpoints, want)
					}
				}
				if ev := d.Events[i]; ev.Dial != e.EventEndpoint(i) || ev.ReplayDial != e.ReplayEndpoint(i) || ev.Topic != "kv-events" {
					t.Errorf("rank %d events %+v, engine publishes on %s (replay %s)", i, ev, e.EventEndpoint(i), e.ReplayEndpoint(i))
				}
			}
		})
	}
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		name string
		mut  func(*Config)
	}{
		{"vllm array", func(c *Config) { c.Flavor, c.EventFormat = VLLM, FormatArray }},
		{"flavour", func(c *Config) { c.Flavor = "trt" }},
		{"format", func(c *Config) { c.EventFormat = "json" }},
		{"uneven shards", func(c *Config) { c.TP, c.KVBytesPerToken, c.BlockSize = 3, 1, 16 }},
		{"negative dp", func(c *Config) { c.DP = -1 }},
		{"ports past 65535", func(c *Config) { c.ControlPort = 65535; c.TP = 2 }},
		{"speedup", func(c *Config) { c.Speedup = -1 }},
		{"template", func(c *Config) { c.ChatTemplate = "jinja" }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{Listen: "127.0.0.1:0"}
			c.mut(&cfg)
			e, err := Start(cfg)
			if err == nil {
				e.Close()
				t.Fatal("started")
			}
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v does not match ErrConfig", err)
			}
		})
	}
}

// TestRunnerSecretRequired: runners that bind beyond loopback need a shared
// secret or the explicit opt-out; on loopback neither is needed.
func TestRunnerSecretRequired(t *testing.T) {
	cases := []struct {
		name    string
		mut     func(*Config)
		wantErr bool
	}{
		{"loopback by default", func(*Config) {}, false},
		{"localhost", func(c *Config) { c.AdvertiseHost = "localhost" }, false},
		{"advertised beyond loopback binds every interface", func(c *Config) { c.AdvertiseHost = "10.0.0.7" }, true},
		{"explicit wildcard", func(c *Config) { c.ControlHost = "0.0.0.0" }, true},
		{"explicit address", func(c *Config) { c.ControlHost = "10.0.0.7" }, true},
		{"with a secret", func(c *Config) { c.AdvertiseHost, c.RunnerSecret = "10.0.0.7", "s3cret" }, false},
		{"insecure opt-out", func(c *Config) { c.AdvertiseHost, c.RunnerInsecure = "10.0.0.7", true }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{}
			c.mut(&cfg)
			cfg.setDefaults()
			err := cfg.validate()
			if !c.wantErr {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrConfig) || !errors.Is(err, runner.ErrNoSecret) {
				t.Fatalf("error %v, want ErrConfig and runner.ErrNoSecret", err)
			}
			for _, name := range []string{"--runner-secret-file", runner.SecretEnv, "--runner-insecure"} {
				if !strings.Contains(err.Error(), name) {
					t.Fatalf("error %q does not name %s", err, name)
				}
			}
		})
	}
}
