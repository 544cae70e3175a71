package serve

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kvrouter/internal/bus"
	"kvrouter/internal/direct"
	"kvrouter/internal/discovery"
	"kvrouter/internal/kvevents"
)

// TestRegistrationPointingElsewhere: a registration whose runner endpoint is
// away from its worker's host names no hint source (whoever can publish in
// discovery could point engines' pulls at any host and port); it is counted,
// and --peer-allow takes it.
func TestRegistrationPointingElsewhere(t *testing.T) {
	elsewhere := func(w *discovery.Worker) {
		w.RuntimeData, _ = w.RuntimeData.Set("router_hint_source_control_endpoints", map[string]string{"0": "tcp://10.9.9.9:6379"})
	}
	for _, allow := range [][]string{nil, {"10.9.0.0/16"}} {
		h := newHarness(t)
		ea, eb := newEngine(t, testModel), newEngine(t, testModel)
		a, b := h.agent("a", ea), h.agent("b", eb, elsewhere)
		toks := prompt(100, 8)
		b.store(b.owner(), toks[:6*testBS], "", kvevents.TierExternal)
		a.ready(a.rank(), a.owner())
		b.ready(b.rank(), b.owner())
		g := h.service(func(o *Options) { o.PeerAllow, o.AllowTargetOverride = allow, true })
		waitWorkers(t, g, 2)
		body := completionBody(toks, "")
		if allow != nil {
			eventually(t, "the hint to the allowed endpoint", func() bool {
				r := g.routeTo(t, body, "a")
				return strings.Contains(string(r.Hint), "tcp://10.9.9.9:6379")
			})
			continue
		}
		// b's runner holds the prefix, yet no hint names it.
		eventually(t, "b's blocks indexed", func() bool { return g.routeTo(t, body, "b").OverlapBlocks == 6 })
		if r := g.routeTo(t, body, "a"); string(r.Hint) != "null" {
			t.Fatalf("hint to a refused endpoint: %s", r.Hint)
		}
		eventually(t, "b's refusal counted", func() bool {
			return strings.Contains(string(get(t, g.admin()+"/metrics")), "kvrouter_peer_endpoints_refused_total 1\n")
		})
	}
}

// TestEmbeddedNATSBeyondLoopback: a router whose embedded NATS others can
// reach requires the token it generated at start, written where agents
// read it; a client without it is refused.
func TestEmbeddedNATSBeyondLoopback(t *testing.T) {
	file := filepath.Join(t.TempDir(), "nats-token")
	o := Defaults()
	o.Listen, o.AdminListen, o.NATSListen, o.Log = "127.0.0.1:0", "127.0.0.1:0", "0.0.0.0:0", quiet()
	o.NATSAuth = bus.Auth{TokenFile: file}
	g, err := Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if g.Bus.TokenFile != file {
		t.Fatalf("token file %q, want %q", g.Bus.TokenFile, file)
	}
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(g.Bus.URL, "nats://"))
	url := "nats://127.0.0.1:" + port
	if b, err := bus.Open(context.Background(), bus.Options{URL: url, Logger: quiet()}); !errors.Is(err, bus.ErrAuth) {
		if err == nil {
			b.Close()
		}
		t.Fatalf("an agent without the token: %v, want ErrAuth", err)
	}
	agent := bus.Auth{TokenFile: file}
	if err := agent.ReadSecrets("", false, func(string) (string, bool) { return "", false }); err != nil {
		t.Fatal(err)
	}
	b, err := bus.Open(context.Background(), bus.Options{URL: url, Auth: agent, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
}

// TestPromptPastTheContext: the router learns the context from the
// engine's /v1/models and refuses a longer prompt itself.
func TestPromptPastTheContext(t *testing.T) {
	h := newHarness(t)
	e := newEngine(t, testModel)
	e.maxModelLen = 3 * testBS
	g := h.service(func(o *Options) {
		o.Workers = []direct.WorkerSpec{spec(t, e, "")}
		o.ContextEvery = 10 * time.Millisecond
	})
	waitWorkers(t, g, 1)
	var status int
	var body []byte
	eventually(t, "the context learned", func() bool {
		status, _, body = post(t, g.url(), "/v1/completions", completionBody(prompt(1, 4), ""))
		return status == http.StatusBadRequest
	})
	if !strings.Contains(string(body), "max_model_len") {
		t.Fatalf("%s", body)
	}
	// Until the context was learned, long prompts went through.
	before := len(e.requests())
	post(t, g.url(), "/v1/completions", completionBody(prompt(1, 4), ""))
	if status, _, body := post(t, g.url(), "/v1/completions", completionBody(prompt(1, 3), "")); status != http.StatusOK {
		t.Fatalf("a prompt within the context: %d %s", status, body)
	}
	if n := len(e.requests()) - before; n != 1 {
		t.Fatalf("the engine got %d requests, want only the one within its context", n)
	}
}
