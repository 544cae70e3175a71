package mocker

import (
	"encoding/json"
	"net/http"
	"testing"
)

func TestHTTPErrors(t *testing.T) {
	e := startEngine(t, func(c *Config) { c.GPUBlocks = 4; c.DP = 2 })
	cases := []struct {
		name string
		path string
		body map[string]any
		code int
	}{
		{"unknown model", pathCompletions, map[string]any{"model": "other", "prompt": "x"}, http.StatusNotFound},
		{"no prompt", pathCompletions, map[string]any{}, http.StatusBadRequest},
		{"rank out of range", pathCompletions, map[string]any{"prompt": []int{1}, "dp_rank": 2}, http.StatusBadRequest},
		{"larger than the GPU pool", pathCompletions, map[string]any{"prompt": []int{1}, "max_tokens": 4 * 64}, http.StatusBadRequest},
		{"fits exactly", pathCompletions, map[string]any{"prompt": []int{1}, "max_tokens": 4*64 - 1}, http.StatusOK},
		{"chat without messages", pathChat, map[string]any{"messages": []any{}}, http.StatusBadRequest},
		{"evict unknown tier", pathAdminEvict, map[string]any{"tier": "disk"}, http.StatusBadRequest},
		{"evict rank out of range", pathAdminEvict, map[string]any{"dp_rank": 5}, http.StatusBadRequest},
		{"tokenize nothing", pathTokenize, map[string]any{}, http.StatusBadRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, err := http.Post(e.URL()+c.path, contentJSON, jsonBody(t, c.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != c.code {
				t.Fatalf("status %d, want %d", resp.StatusCode, c.code)
			}
			if c.code != http.StatusOK {
				var a apiError
				if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || a.Error.Code != c.code || a.Error.Message == "" {
					t.Fatalf("error body %+v (%v)", a, err)
				}
			}
		})
	}
	var models modelList
	doJSON(t, mustRequest(t, http.MethodGet, e.URL()+pathModels), &models)
	if len(models.Data) != 1 || models.Data[0].ID != DefaultModel || models.Object != objectList {
		t.Fatalf("models %+v", models)
	}
	resp, err := http.Get(e.URL() + pathHealth)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("health: %v %v", resp, err)
	}
	resp.Body.Close()
	// The vLLM endpoint is not served by the SGLang flavour.
	if resp, err := http.Get(e.URL() + pathEngineArgs); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("engine args on sglang: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}

func mustRequest(t *testing.T, method, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestPickRank: an explicit rank wins; otherwise the least loaded, ties to
// the lowest rank.
func TestPickRank(t *testing.T) {
	e := &Engine{}
	for i := range 3 {
		e.ranks = append(e.ranks, &rank{id: i})
	}
	rankOf := func(n int) *int { return &n }
	cases := []struct {
		loads []int64
		want  *int
		got   int
	}{
		{[]int64{0, 0, 0}, nil, 0},
		{[]int64{2, 1, 1}, nil, 1},
		{[]int64{2, 3, 0}, nil, 2},
		{[]int64{0, 5, 5}, rankOf(2), 2},
	}
	for _, c := range cases {
		for i, l := range c.loads {
			e.ranks[i].load.Store(l)
		}
		r, err := e.pickRank(c.want)
		if err != nil || r.id != c.got {
			t.Fatalf("loads %v want %v: got rank %v (%v)", c.loads, c.want, r, err)
		}
	}
	if _, err := e.pickRank(rankOf(3)); err == nil {
		t.Fatal("rank 3 of 3 accepted")
	}
}
