// This file tests how the front door answers a model no worker serves.

package frontdoor

import (
	"net/http"
	"strings"
	"testing"
)

// TestUnknownModelWhileDiscoveryStarts: a router that has not yet read the
// agents' registrations answers an unknown model 503 with Retry-After (the
// model may be served; a restarted replica must not tell clients it is
// not), and 404 once discovery is in step.
func TestUnknownModelWhileDiscoveryStarts(t *testing.T) {
	f := newFront(t, okEngine, nil)
	f.s.Router.SetDiscoveryLive(false)
	steps := []struct {
		live   bool
		status int
		says   string
	}{
		{false, http.StatusServiceUnavailable, "not known yet"},
		{true, http.StatusNotFound, "not served by any worker"},
	}
	for _, s := range steps {
		f.s.Router.SetDiscoveryLive(s.live)
		for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
			body := `{"model":"nope","prompt":"hello"}`
			if strings.Contains(path, "chat") {
				body = `{"model":"nope","messages":[{"role":"user","content":"hello"}]}`
			}
			resp, got := f.post(t, path, body)
			if resp.StatusCode != s.status || !strings.Contains(got, s.says) {
				t.Fatalf("live=%v %s: %s %s", s.live, path, resp.Status, got)
			}
			if retry := resp.Header.Get("Retry-After"); (s.status == http.StatusServiceUnavailable) != (retry != "") {
				t.Fatalf("live=%v %s: Retry-After %q", s.live, path, retry)
			}
		}
	}
	// The known model is served throughout.
	if resp, body := f.post(t, "/v1/completions", `{"model":"m","prompt":"hello"}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("known model: %s %s", resp.Status, body)
	}
}
