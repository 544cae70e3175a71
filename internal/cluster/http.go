// This file holds the HTTP calls that drive a running cluster: GET, and POST with a forced target.

package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// HeaderTarget forces the router's target (kvrouter serve
// --allow-target-override).
const HeaderTarget = "x-kvrouter-target"

// driver talks to the cluster's processes for the programs that drive it
// (the demo, the benchmarks); the workload itself goes through
// loadgen.Driver's own client.
var driver = &http.Client{Timeout: 30 * time.Second}

// Get fetches url and returns a 200 answer's body.
func Get(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	_, data, err := do(req)
	return data, err
}

// PostJSON posts body (marshalled, nil for none) to url, with HeaderTarget
// when target is set, and decodes a 200 answer into out (unless nil). It
// returns the answer's headers.
func PostJSON(ctx context.Context, url, target string, body, out any) (http.Header, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if target != "" {
		req.Header.Set(HeaderTarget, target)
	}
	h, data, err := do(req)
	if err != nil || out == nil {
		return h, err
	}
	if err := json.Unmarshal(data, out); err != nil {
		return h, fmt.Errorf("POST %s: answer: %w", url, err)
	}
	return h, nil
}

func do(req *http.Request) (http.Header, []byte, error) {
	resp, err := driver.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.Header, nil, fmt.Errorf("%s %s: %w", req.Method, req.URL, err)
	}
	if resp.StatusCode != http.StatusOK {
		return resp.Header, nil, fmt.Errorf("%s %s: %s: %s", req.Method, req.URL, resp.Status, bytes.TrimSpace(data))
	}
	return resp.Header, data, nil
}
