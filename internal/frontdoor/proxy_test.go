package frontdoor

import "testing"

func TestResponseUsage(t *testing.T) {
	tests := []struct {
		body         string
		cached, peer int
		none         bool
	}{
		{body: `{"choices":[{"text":"\"usage\""}],"usage":{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":4},"kvrouter":{"peer_restored_tokens":3}}}`, cached: 4, peer: 3},
		{body: `{"usage":{"prompt_tokens":9}}`},
		{body: `{"usage":null}`, none: true},
		{body: `{"choices":[]}`, none: true},
		{body: `{"usage":{"prompt_tokens":9}`, none: true},
		{body: `{"usage":{"prompt_tokens":"x"}}`, none: true},
		{body: `["usage"]`, none: true},
		{body: `{"usage":{"prompt_tokens":9,"prompt_tokens_details":null,"kvrouter":{"peer_restored_tokens":3}}}`, peer: 3},
		{body: `{"usage":{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":1.5}}}`, none: true},
		{body: `{"usage":{"prompt_tokens":9,"kvrouter":[]}}`, none: true},
		{body: `{"usage":{"prompt_tokens":7},"usage":{"prompt_tokens":9}}`},
	}
	for _, tc := range tests {
		u := responseUsage([]byte(tc.body))
		if (u == nil) != tc.none {
			t.Fatalf("%s: usage %+v, want none: %v", tc.body, u, tc.none)
		}
		if u == nil {
			continue
		}
		var cached, peer int
		if u.Details != nil {
			cached = u.Details.CachedTokens
		}
		if u.KVRouter != nil {
			peer = u.KVRouter.PeerRestoredTokens
		}
		if u.PromptTokens != 9 || cached != tc.cached || peer != tc.peer {
			t.Errorf("%s: %+v", tc.body, u)
		}
	}
}
