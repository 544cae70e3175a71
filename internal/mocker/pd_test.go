package mocker

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func roleEngine(t *testing.T, flavor Flavor, role string) *Engine {
	t.Helper()
	return startEngine(t, func(c *Config) {
		c.Flavor, c.Role, c.BlockSize = flavor, role, 16
		if flavor == SGLang && role == RolePrefill {
			c.BootstrapPort = freePorts(t, 1)
		}
	})
}

// leg posts a body to e and returns the status and the raw answer.
func leg(t *testing.T, e *Engine, body map[string]any) (int, []byte) {
	t.Helper()
	resp, err := http.Post(e.URL()+pathCompletions, contentJSON, jsonBody(t, body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b json.RawMessage
	_ = json.NewDecoder(resp.Body).Decode(&b)
	return resp.StatusCode, b
}

// TestDisaggregatedVLLM: a prefill leg answers with kv_transfer_params
// naming its runner and blocks; the decode leg pulls them and answers what
// an aggregated engine answers.
func TestDisaggregatedVLLM(t *testing.T) {
	p, d, a := roleEngine(t, VLLM, RolePrefill), roleEngine(t, VLLM, RoleDecode), roleEngine(t, VLLM, RoleAggregated)
	prompt := longPrompt(t, a, "vllm-pd", 300)
	want := complete(t, a, map[string]any{"prompt": prompt, "max_tokens": 8})

	status, raw := leg(t, p, map[string]any{"prompt": prompt, "max_tokens": 1, "stream": false,
		"kv_transfer_params": map[string]any{"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": nil,
			"remote_block_ids": nil, "remote_host": nil, "remote_port": nil}})
	if status != http.StatusOK {
		t.Fatalf("prefill leg: %d %s", status, raw)
	}
	var pre struct {
		KV map[string]any `json:"kv_transfer_params"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // block hashes are 64-bit integers
	if err := dec.Decode(&pre); err != nil || pre.KV == nil {
		t.Fatalf("prefill answer without kv_transfer_params: %s", raw)
	}
	blocks, _ := pre.KV["remote_block_ids"].([]any)
	if pre.KV["do_remote_prefill"] != true || pre.KV["remote_host"] != "127.0.0.1" ||
		pre.KV["remote_port"] != json.Number(strconv.Itoa(p.cfg.controlPort(0, 0))) || len(blocks) != len(tokenize(t, a, prompt))/16 {
		t.Fatalf("prefill's kv_transfer_params %v", pre.KV)
	}

	var got completion
	if code := post(t, d.URL()+pathCompletions, map[string]any{"prompt": prompt, "max_tokens": 8, "kv_transfer_params": pre.KV}, &got); code != http.StatusOK {
		t.Fatalf("decode leg: %d", code)
	}
	if got.text() != want.text() || got.text() == "" {
		t.Fatalf("decode answered %q, an aggregated engine %q", got.text(), want.text())
	}
	if got.Usage.KVRouter.PeerRestoredTokens != len(blocks)*16 || got.Usage.KVRouter.SourceEndpoint == nil ||
		*got.Usage.KVRouter.SourceEndpoint != p.ControlEndpoint(0) {
		t.Fatalf("decode usage %+v: want %d tokens pulled from %s", got.Usage.KVRouter, len(blocks)*16, p.ControlEndpoint(0))
	}
	// The decode engine said it was done: the prefill lets go at once.
	eventually(t, func() bool {
		return strings.Contains(metricsText(t, p), metricKVTransfers+`{leg="prefill",outcome="released"} 1`)
	})
	assertMetric(t, d, metricKVTransfers+`{leg="decode",outcome="restored"} 1`)

	// Each role refuses the other's leg, as vLLM's kv_producer and
	// kv_consumer connectors do.
	if code, _ := leg(t, p, map[string]any{"prompt": prompt, "kv_transfer_params": pre.KV}); code != http.StatusBadRequest {
		t.Fatalf("prefill engine took a decode leg: %d", code)
	}
	if code, _ := leg(t, d, map[string]any{"prompt": prompt, "kv_transfer_params": map[string]any{"do_remote_decode": true}}); code != http.StatusBadRequest {
		t.Fatalf("decode engine took a prefill leg: %d", code)
	}
	// A whole request still runs anywhere: vLLM serves it whatever its KV role.
	if got := complete(t, d, map[string]any{"prompt": prompt, "max_tokens": 8}); got.text() != want.text() {
		t.Fatalf("a whole request on the decode engine: %q", got.text())
	}
}

// TestDisaggregatedSGLang: both legs at once with the bootstrap fields; the
// decode engine learns from the prefill's bootstrap server where the blocks
// are, once the prefill is done.
func TestDisaggregatedSGLang(t *testing.T) {
	p, d, a := roleEngine(t, SGLang, RolePrefill), roleEngine(t, SGLang, RoleDecode), roleEngine(t, SGLang, RoleAggregated)
	prompt := longPrompt(t, a, "sglang-pd", 300)
	want := complete(t, a, map[string]any{"prompt": prompt, "max_tokens": 8})
	body := func(room uint64) map[string]any {
		return map[string]any{"prompt": prompt, "max_tokens": 8, "bootstrap_host": "127.0.0.1",
			"bootstrap_port": p.BootstrapAddr().(*net.TCPAddr).Port, "bootstrap_room": room}
	}
	room := uint64(1) << 62
	var wg sync.WaitGroup
	var pre completion
	var preCode int
	wg.Go(func() {
		time.Sleep(50 * time.Millisecond) // the decode leg asks first
		preCode = post(t, p.URL()+pathCompletions, body(room), &pre)
	})
	var got completion
	code := post(t, d.URL()+pathCompletions, body(room), &got)
	wg.Wait()
	if code != http.StatusOK || preCode != http.StatusOK {
		t.Fatalf("legs: decode %d, prefill %d", code, preCode)
	}
	if len(pre.Choices) != 1 || pre.Usage.CompletionTokens != 1 {
		t.Fatalf("the prefill engine generated %d tokens, want 1", pre.Usage.CompletionTokens)
	}
	if got.text() != want.text() {
		t.Fatalf("decode answered %q, an aggregated engine %q", got.text(), want.text())
	}
	n := len(tokenize(t, a, prompt)) / 16 * 16
	if got.Usage.KVRouter.PeerRestoredTokens != n {
		t.Fatalf("decode pulled %d tokens, want %d", got.Usage.KVRouter.PeerRestoredTokens, n)
	}
	eventually(t, func() bool {
		return strings.Contains(metricsText(t, p), metricKVTransfers+`{leg="prefill",outcome="released"} 1`)
	})
	// A decode server runs without a radix cache: it reports no GPU block.
	if m := metricsText(t, d); !strings.Contains(m, metricGPUCached+`{dp_rank="0"} 0`) {
		t.Fatalf("decode engine caches on the GPU:\n%s", m)
	}

	// Without the bootstrap fields neither role serves a request.
	for _, e := range []*Engine{p, d} {
		if code, raw := leg(t, e, map[string]any{"prompt": prompt}); code != http.StatusBadRequest || !strings.Contains(string(raw), "bootstrap_room") {
			t.Fatalf("a whole request on a %s engine: %d %s", e.cfg.Role, code, raw)
		}
	}
}

// TestDecodeWithoutPrefill: a decode leg whose prefill never comes fails
// once the transfer timeout passes, rather than answering from nothing.
func TestDecodeWithoutPrefill(t *testing.T) {
	p := roleEngine(t, SGLang, RolePrefill)
	d := startEngine(t, func(c *Config) {
		c.Flavor, c.Role, c.BlockSize, c.KVTransferTimeout = SGLang, RoleDecode, 16, 200*time.Millisecond
	})
	bp := p.BootstrapAddr().(*net.TCPAddr).Port
	code, raw := leg(t, d, map[string]any{"prompt": "hello there", "bootstrap_host": "127.0.0.1", "bootstrap_port": bp, "bootstrap_room": 7})
	if code != http.StatusInternalServerError || !strings.Contains(string(raw), "hand-over failed") {
		t.Fatalf("decode without its prefill: %d %s", code, raw)
	}
	assertMetric(t, d, metricKVTransfers+`{leg="decode",outcome="unserved"} 1`)
}

// TestRouterRankWins: the rank a router names in its header is the one
// served, whatever rank field the client wrote into the body.
func TestRouterRankWins(t *testing.T) {
	for _, f := range []Flavor{SGLang, VLLM} {
		e := startEngine(t, func(c *Config) { c.Flavor, c.DP = f, 2 })
		for _, hdr := range []string{headerDPRank, headerVLLMDPRank} {
			if f == SGLang && hdr == headerVLLMDPRank {
				continue
			}
			req, _ := http.NewRequest(http.MethodPost, e.URL()+pathCompletions,
				jsonBody(t, map[string]any{"prompt": []int{1, 2, 3}, "max_tokens": 1, "dp_rank": 0, "data_parallel_rank": 0}))
			req.Header.Set(hdr, "1")
			var c completion
			doJSON(t, req, &c)
			if c.Usage.KVRouter.DPRank != 1 {
				t.Fatalf("%s, header %s: served on rank %d, want the router's 1", f, hdr, c.Usage.KVRouter.DPRank)
			}
		}
	}
}

func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
