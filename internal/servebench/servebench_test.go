package servebench

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"slices"
	"testing"
	"time"

	"kvrouter/internal/frontdoor"
	"kvrouter/internal/tokenizer"
)

// TestRun: a short real run routes every request to the null engine, and
// the counts of the client, the engine and the router's timing agree.
func TestRun(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Workers, cfg.Duration, cfg.Warmup, cfg.Concurrency, cfg.PromptTokens = 16, time.Second, 100*time.Millisecond, 4, 256
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests == 0 || res.Errors != 0 {
		t.Fatalf("%d requests, %d errors", res.Requests, res.Errors)
	}
	if res.BackendHits != res.Requests || int64(res.Traced) != res.Requests {
		t.Fatalf("client saw %d answers, the null engine %d requests, the router timed %d",
			res.Requests, res.BackendHits, res.Traced)
	}
	if res.Workers != 16 || res.Sources != 32 || res.Input != "ids" || res.Concurrency != 4 {
		t.Fatalf("run shape %+v", res)
	}
	if res.RoutedRPS <= 0 || res.AddedP50us <= 0 || res.AddedP99us < res.AddedP50us || res.DecideP50us <= 0 ||
		res.DecideP50us > res.AddedP99us || res.CPUsPer1k <= 0 || res.ClientCPUsPer1 <= 0 || res.ClientP50us < res.AddedP50us {
		t.Fatalf("implausible figures %+v", res)
	}
	if runtime.GOOS == "linux" && res.RSSMB <= 0 {
		t.Fatalf("rss %v MB", res.RSSMB)
	}

	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"workers", "routed_rps", "added_p50_us", "added_p99_us", "tokenize_p50_us", "cpu_s_per_1k", "rss_mb"} {
		if _, ok := m[k].(float64); !ok {
			t.Errorf("JSON key %q missing or not a number in %s", k, b)
		}
	}
}

// TestRunText: with text prompts the router tokenizes, and says how long
// that took.
func TestRunText(t *testing.T) {
	for _, tc := range []struct {
		text            bool
		tokenizer, want string
	}{
		{true, "", frontdoor.TokenizerDemo},
		{false, realTokenizer, realTokenizer},
	} {
		cfg := DefaultConfig()
		cfg.Workers, cfg.Duration, cfg.Warmup, cfg.Concurrency, cfg.PromptTokens = 4, 300*time.Millisecond, 0, 2, 128
		cfg.Text, cfg.Tokenizer = tc.text, tc.tokenizer
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if res.Requests == 0 || res.Errors != 0 || res.BackendHits != res.Requests || res.Input != "text" || res.TokenizeP50us <= 0 ||
			res.Tokenizer != tc.want || res.MeanTokens < 100 {
			t.Fatalf("text run %+v", res)
		}
	}
}

// realTokenizer is a small byte-level BPE tokenizer of the Llama 3 family.
const realTokenizer = "../tokenizer/testdata/llama3-mini.json"

// TestWorkloadPrefixes: a request continuing a conversation starts with the
// blocks its rank holds, token for token, whether sent as ids or as text
// the router tokenizes; so the fleet's caches are hit as a real fleet's.
func TestWorkloadPrefixes(t *testing.T) {
	real, err := frontdoor.LoadLocal(realTokenizer, "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []*frontdoor.Local{nil, {Model: tokenizer.Demo()}, real} {
		text := tok != nil
		w, err := newWorkload(7, 480, tok)
		if err != nil {
			t.Fatal(err)
		}
		continued := 0
		for i := range 64 {
			q, err := w.request(i, 10)
			if err != nil {
				t.Fatal(err)
			}
			var body struct {
				Prompt json.RawMessage `json:"prompt"`
			}
			if err := json.Unmarshal(q.body, &body); err != nil {
				t.Fatal(err)
			}
			var toks []uint32
			if text {
				var s string
				if err := json.Unmarshal(body.Prompt, &s); err != nil {
					t.Fatal(err)
				}
				toks = tok.Text(s, true)
			} else if err := json.Unmarshal(body.Prompt, &toks); err != nil {
				t.Fatal(err)
			}
			held := w.sys[systemOf(q.rank)]
			if text {
				held = tok.Text(w.sysText[systemOf(q.rank)], true)
			}
			if q.conv >= 0 {
				held = w.conversation(q.rank, q.conv)
				continued++
			}
			full := len(held) / blockSize * blockSize
			if len(toks) <= full || !slices.Equal(toks[:full], held[:full]) {
				t.Fatalf("text %v: request %d (rank %d, conversation %d) does not start with the %d tokens held",
					text, i, q.rank, q.conv, full)
			}
		}
		if continued == 0 || continued == 64 {
			t.Fatalf("%d of 64 requests continue a conversation: want a mix", continued)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, edit := range []func(*Config){
		func(c *Config) { c.Workers = 0 },
		func(c *Config) { c.DP = 0 },
		func(c *Config) { c.Concurrency = 0 },
		func(c *Config) { c.Duration = 0 },
		func(c *Config) { c.PromptTokens = 16 },
	} {
		cfg := DefaultConfig()
		edit(&cfg)
		if _, err := Run(context.Background(), cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("config %+v: err %v, want ErrConfig", cfg, err)
		}
	}
}
