package serve

import (
	"net/http"
	"strings"
	"testing"

	"kvrouter/internal/direct"
)

// TestOperatorViewsOffThePublicPort: /metrics and /debug/* answer on the
// admin listener only. On the OpenAI port, POST /debug/route told any
// client whether another tenant's prefix was cached, and /debug/workers
// listed the runners' endpoints.
func TestOperatorViewsOffThePublicPort(t *testing.T) {
	h := newHarness(t)
	e := newEngine(t, testModel)
	g := h.service(func(o *Options) { o.Workers = []direct.WorkerSpec{spec(t, e, "")} })
	waitWorkers(t, g, 1)
	body := completionBody(prompt(1, 2), "")
	for _, tc := range []struct{ method, path string }{{"GET", "/metrics"}, {"GET", "/debug/workers"}, {"POST", "/debug/route"}} {
		for base, want := range map[string]int{g.url(): http.StatusNotFound, g.admin(): http.StatusOK} {
			req, err := http.NewRequest(tc.method, base+tc.path, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("%s %s%s: %s, want %d", tc.method, base, tc.path, resp.Status, want)
			}
		}
	}
	// The front door stays where it was.
	for _, path := range []string{"/healthz", "/readyz", "/v1/models"} {
		get(t, g.url()+path)
	}
	if !strings.HasPrefix(g.AdminAddr, "127.0.0.1:") {
		t.Fatalf("operator views on %s", g.AdminAddr)
	}
	// Without --admin-listen there are none.
	none := h.service(func(o *Options) { o.AdminListen = "" })
	if none.AdminAddr != "" {
		t.Fatalf("operator views on %q without --admin-listen", none.AdminAddr)
	}
}

// TestAdminListenDefault: the operator views listen on loopback unless told
// otherwise.
func TestAdminListenDefault(t *testing.T) {
	if host := strings.Split(Defaults().AdminListen, ":")[0]; host != "127.0.0.1" {
		t.Fatalf("--admin-listen defaults to %s", Defaults().AdminListen)
	}
}
