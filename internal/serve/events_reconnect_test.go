package serve

import (
	"net"
	"strconv"
	"testing"

	"kvrouter/internal/direct"
	"kvrouter/internal/mocker"
)

// TestEventsBindRouterRestart: an engine that connects to the router's
// --events-bind (the mocker, llm-d's convention) dials again when the
// router restarts, so the new router leaves approximate mode and follows
// the engine's stores exactly, as it did before the restart.
func TestEventsBindRouterRestart(t *testing.T) {
	h := newHarness(t)
	bind := freeTCP(t)
	ctl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctlPort := ctl.Addr().(*net.TCPAddr).Port
	ctl.Close()
	eng, err := mocker.Start(mocker.Config{
		Listen: "127.0.0.1:0", Model: testModel, Flavor: mocker.VLLM, BlockSize: testBS, Speedup: 1000,
		EventsConnect: bind, ReplayEndpoint: "none", ControlPort: ctlPort, Logger: quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	ws, err := direct.ParseWorkerSpec("url=" + eng.URL() + ",block_size=" + strconv.Itoa(testBS))
	if err != nil {
		t.Fatal(err)
	}
	start := func() *Service {
		g := h.service(func(o *Options) {
			o.Workers = []direct.WorkerSpec{ws}
			o.EventsBind = bind
		})
		waitWorkers(t, g, 1)
		return g
	}
	id := eng.Addr().String()
	// exact waits until a prompt the engine just computed shows in the
	// router's index with every block, the worker in events mode. Each
	// try is a new prompt: what the engine publishes while no router
	// listens is lost, as with any ZMQ PUB.
	n := uint32(0)
	exact := func(g *Service, what string) {
		t.Helper()
		eventually(t, what, func() bool {
			n++
			toks := make([]uint32, 3*testBS)
			for i := range toks {
				toks[i] = (n*31 + uint32(i)*17) % 790 // the mocker's vocabulary
			}
			body := completionBody(toks, "")
			if status, _, b := post(t, g.url(), "/v1/completions", body); status != 200 {
				t.Fatalf("completion: %d %s", status, b)
			}
			w, _ := g.Router.Worker(id)
			return w.Mode.String() == "events" && g.route(t, body).OverlapBlocks == 3
		})
	}
	g := start()
	exact(g, "events before the restart")
	g.Close()
	g = start()
	if w, _ := g.Router.Worker(id); w.Mode.String() != "approximate" {
		t.Fatalf("a new router starts in approximate mode, got %v", w.Mode)
	}
	exact(g, "events after the router restarted")
}
