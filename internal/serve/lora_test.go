package serve

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"kvrouter/internal/direct"
	"kvrouter/internal/mocker"
)

// TestLoRAFindsItsBlocks: behind simulated engines serving a LoRA
// adapter, a request naming the adapter as its engine reads it (vLLM: the
// model; SGLang: lora_path or "base:adapter") is routed, once its blocks
// are cached, to the worker holding them; the same prompt for the base
// model finds none of them.
func TestLoRAFindsItsBlocks(t *testing.T) {
	for _, tc := range []struct {
		flavor mocker.Flavor
		engine string
		adapt  string // what a request adds to name the adapter
	}{
		{mocker.VLLM, "vllm", `"model":"sql"`},
		{mocker.SGLang, "sglang", `"model":"kvrouter-demo","lora_path":"sql"`},
		{mocker.SGLang, "sglang", `"model":"kvrouter-demo:sql"`},
	} {
		t.Run(tc.adapt, func(t *testing.T) {
			var specs []direct.WorkerSpec
			for range 3 {
				m := startSimEngine(t, func(c *mocker.Config) {
					c.Flavor, c.LoRAs = tc.flavor, []string{"chat", "sql"}
					c.ReplayEndpoint = "tcp://127.0.0.1:0"
				})
				// replay= heals a batch published before the subscription
				// reached the engine (ZMQ drops it), which nothing else would.
				s, err := direct.ParseWorkerSpec("url=" + m.URL() + ",events=" + m.EventEndpoint(0) + ",replay=" + m.ReplayEndpoint(0) + ",engine=" + tc.engine)
				if err != nil {
					t.Fatal(err)
				}
				specs = append(specs, s)
			}
			g := newHarness(t).service(func(o *Options) { o.Workers, o.AllowTargetOverride = specs, true })
			waitWorkers(t, g, 3)
			text := strings.Repeat("The adapter writes SQL for the cache of every block it sees. ", 12)
			body := func(adapt string) string {
				return fmt.Sprintf(`{%s,"prompt":%q,"max_tokens":2}`, adapt, text)
			}
			status, hdr, b := post(t, g.url(), "/v1/completions", body(tc.adapt))
			if status != http.StatusOK {
				t.Fatalf("completion: %d %s", status, b)
			}
			served := hdr.Get(headerWorker)
			var rv routeView
			polls := 0
			eventually(t, "the adapter's blocks to be indexed", func() bool {
				rv = g.route(t, body(tc.adapt))
				if rv.Blocks > 0 && rv.OverlapBlocks == rv.Blocks {
					return true
				}
				// A batch the engine published before the router's
				// subscription reached it is lost to ZMQ; the engine's next
				// batch shows the gap, which its replay heals.
				if polls++; polls%40 == 0 {
					post(t, g.url(), "/v1/completions", fmt.Sprintf(`{%s,"prompt":"nudge %d %s","max_tokens":2}`, tc.adapt, polls, text), headerTarget, served)
				}
				return false
			})
			if rv.Target.WorkerID != served || rv.OverlapBlocks != rv.Blocks {
				t.Fatalf("adapter request routed %+v, want all %d blocks on %s", rv, rv.Blocks, served)
			}
			for _, other := range []string{`"model":"kvrouter-demo"`, `"model":"kvrouter-demo","lora_path":"chat"`} {
				if tc.flavor == mocker.VLLM && strings.Contains(other, "lora_path") {
					other = `"model":"chat"`
				}
				if rv := g.route(t, body(other)); rv.OverlapBlocks != 0 {
					t.Errorf("%s found the adapter's blocks: %+v", other, rv)
				}
			}
		})
	}
}
