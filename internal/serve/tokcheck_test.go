package serve

import (
	"encoding/json"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"

	"kvrouter/internal/direct"
	"kvrouter/internal/frontdoor"
	"kvrouter/internal/mocker"
	"kvrouter/internal/tokcheck"
)

// startSimEngine starts a simulated vLLM engine in process, on loopback.
func startSimEngine(t *testing.T, edit func(*mocker.Config)) *mocker.Engine {
	t.Helper()
	port := func() int {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	cfg := mocker.Config{Listen: "127.0.0.1:0", Flavor: mocker.VLLM, ControlPort: port(),
		EventsEndpoint: "tcp://*:" + strconv.Itoa(port()), ReplayEndpoint: "none", Logger: slog.New(slog.DiscardHandler)}
	if edit != nil {
		edit(&cfg)
	}
	m, err := mocker.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// TestTokenizerCheck: a router whose tokenizer is not its engines' says
// so in /metrics and /debug/workers soon after the worker joins; one
// asking the engines checks that they answer.
func TestTokenizerCheck(t *testing.T) {
	for _, tc := range []struct {
		name, tokenizer, engineTok string
		compared, mismatch         bool
		metric                     string
	}{
		{"mismatch", frontdoor.TokenizerDemo, "../tokenizer/testdata/llama3-mini.json", true, true, `kvrouter_tokenizer_mismatch{model="kvrouter-demo"} 1`},
		{"match", frontdoor.TokenizerDemo, "", true, false, `kvrouter_tokenizer_mismatch{model="kvrouter-demo"} 0`},
		{"engine", frontdoor.TokenizerEngine, "", false, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := startSimEngine(t, func(c *mocker.Config) { c.Tokenizer, c.ChatTemplate = tc.engineTok, "chatml" })
			ws, err := direct.ParseWorkerSpec("url=" + m.URL())
			if err != nil {
				t.Fatal(err)
			}
			g := newHarness(t).service(func(o *Options) { o.Workers, o.Tokenizer = []direct.WorkerSpec{ws}, tc.tokenizer })
			var view struct {
				Tokenizer struct {
					Tokenizer string            `json:"tokenizer"`
					Checks    []tokcheck.Status `json:"checks"`
				} `json:"tokenizer"`
			}
			eventually(t, "the tokenizer check", func() bool {
				json.Unmarshal(get(t, g.admin()+"/debug/workers"), &view)
				return len(view.Tokenizer.Checks) == 1
			})
			c := view.Tokenizer.Checks[0]
			if view.Tokenizer.Tokenizer != tc.tokenizer || c.Model != mocker.DefaultModel || c.Error != "" ||
				c.Compared != tc.compared || c.Mismatch != tc.mismatch || (tc.mismatch && len(c.Diffs) == 0) {
				t.Fatalf("/debug/workers tokenizer %+v", view.Tokenizer)
			}
			if metrics := string(get(t, g.admin()+"/metrics")); tc.metric != "" && !strings.Contains(metrics, tc.metric) {
				t.Errorf("/metrics lacks %s", tc.metric)
			}
		})
	}
}
