package frontdoor

import (
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"kvrouter/internal/hints"
	"kvrouter/internal/router"
	"kvrouter/internal/tokenizer"
)

func pdServer() *Server {
	return &Server{Tok: &Local{Model: tokenizer.Demo()}, Metrics: NewMetrics(prometheus.NewRegistry(), nil), Log: quiet()}
}

// TestClientTransferFieldsDropped: whatever a client writes to steer the
// engines' KV transfers is gone from the body routed on, the rest byte for
// byte.
func TestClientTransferFieldsDropped(t *testing.T) {
	s := pdServer()
	for _, tc := range []struct{ body, want string }{
		{`{"model":"m","prompt":[1,2],"kv_transfer_params":{"do_remote_prefill":true,"remote_host":"10.0.0.9","remote_port":1},"max_tokens":3}`,
			`{"model":"m","prompt":[1,2],"max_tokens":3}`},
		{`{"model":"m","bootstrap_host":"10.0.0.9","prompt":[1,2],"bootstrap_port":8998,"bootstrap_room":12, "top_p" : 1.0}`,
			`{"model":"m","prompt":[1,2],"top_p" : 1.0}`},
		{`{"model":"m","prompt":[1,2],"kv_transfer_params":null,"kv_transfer_params":{"kv_hint":{}}}`,
			`{"model":"m","prompt":[1,2]}`},
		{`{"model":"m","prompt":[1,2],"max_tokens":3}`, `{"model":"m","prompt":[1,2],"max_tokens":3}`},
	} {
		p, aerr := s.prepare(httptest.NewRequest("POST", "/v1/completions", nil), []byte(tc.body), KindCompletion, nil)
		if aerr != nil {
			t.Fatalf("%s: %v", tc.body, aerr)
		}
		if string(p.body) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.body, p.body, tc.want)
		}
	}
}

func vllmTarget(placement hints.Placement) *router.Decision {
	return &router.Decision{Target: router.Target{Rank: 0, Worker: router.Worker{ID: "p", Engine: router.EngineVLLM, DPSize: 1, Placement: placement}},
		HintDecision: hints.Decision{Reason: hints.ReasonDisabled}}
}

// TestVLLMPrefillBody: the prefill leg asks for one token, unstreamed, with
// NixlConnector's request for a remote decode, and carries the hint inside
// it when that is where the engine reads hints.
func TestVLLMPrefillBody(t *testing.T) {
	s := pdServer()
	body := `{"model":"m","prompt":[1,2],"stream":true,"stream_options":{"include_usage":true},"max_tokens":50,` +
		`"max_completion_tokens":50,"min_tokens":5,"min_completion_tokens":5,"temperature":0.70}`
	p, aerr := s.prepare(httptest.NewRequest("POST", "/v1/completions", nil), []byte(body), KindCompletion, nil)
	if aerr != nil {
		t.Fatal(aerr)
	}
	hint := hints.Hint{Endpoint: "tcp://10.0.0.7:25000", BlockHashes: []uint64{11, 22}}
	for _, tc := range []struct {
		name      string
		placement hints.Placement
		hinted    bool
		hintAt    string // where the hint lands: "params", "top" or ""
	}{
		{name: "no hint", placement: hints.PlaceVLLM},
		{name: "hint in kv_transfer_params", placement: hints.PlaceVLLM, hinted: true, hintAt: "params"},
		{name: "legacy hint in kv_transfer_params", placement: hints.PlaceVLLMOld, hinted: true, hintAt: "params"},
		{name: "an SGLang placement override: top level", placement: hints.PlaceSGLang, hinted: true, hintAt: "top"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := vllmTarget(tc.placement)
			if tc.hinted {
				d.Hint, d.HintDecision = hint, hints.Decision{Reason: hints.ReasonHinted}
			}
			got, err := vllmPrefillBody(p, d)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(got, &m); err != nil {
				t.Fatalf("%s: %v", got, err)
			}
			for k, want := range map[string]string{"stream": "false", "max_tokens": "1", "max_completion_tokens": "1", "temperature": "0.70"} {
				if string(m[k]) != want {
					t.Errorf("%s = %s, want %s in %s", k, m[k], want, got)
				}
			}
			for _, k := range []string{"stream_options", "min_tokens", "min_completion_tokens"} {
				if _, ok := m[k]; ok {
					t.Errorf("%s kept in %s", k, got)
				}
			}
			var kv map[string]json.RawMessage
			if err := json.Unmarshal(m["kv_transfer_params"], &kv); err != nil {
				t.Fatalf("kv_transfer_params %s: %v", m["kv_transfer_params"], err)
			}
			if string(kv["do_remote_decode"]) != "true" || string(kv["do_remote_prefill"]) != "false" || string(kv["remote_host"]) != "null" {
				t.Errorf("kv_transfer_params %s", m["kv_transfer_params"])
			}
			inParams := kv["kv_hint"] != nil || kv["router_hint"] != nil
			atTop := m["kv_hints"] != nil
			if inParams != (tc.hintAt == "params") || atTop != (tc.hintAt == "top") {
				t.Errorf("hint in params %v, at top %v, want %q: %s", inParams, atTop, tc.hintAt, got)
			}
		})
	}
}

// TestBootstrapMembers: the room is below 2^63 and maps to the chosen DP
// rank as SGLang's follow_bootstrap_room reads it; the host is the prefill
// worker's, bracketed when IPv6; the port is its bootstrap server's.
func TestBootstrapMembers(t *testing.T) {
	for _, tc := range []struct {
		url             string
		port, rank, dp  int
		wantHost, wantP string
	}{
		{url: "http://10.0.0.5:30000", rank: 3, dp: 4, wantHost: `"10.0.0.5"`, wantP: "8998"},
		{url: "http://[fd00::1]:30000", port: 9100, rank: 0, dp: 1, wantHost: `"[fd00::1]"`, wantP: "9100"},
		{url: "http://prefill-0.svc:30000", port: 9100, rank: 5, dp: 2, wantHost: `"prefill-0.svc"`, wantP: "9100"},
	} {
		d := &router.Decision{Target: router.Target{Rank: tc.rank, Worker: router.Worker{URL: tc.url, BootstrapPort: tc.port,
			DPStart: tc.rank / tc.dp * tc.dp, DPSize: tc.dp}}}
		for range 50 {
			ms, err := bootstrapMembers(d)
			if err != nil {
				t.Fatal(err)
			}
			if len(ms) != 3 || ms[0].key != "bootstrap_host" || string(ms[0].value) != tc.wantHost || string(ms[1].value) != tc.wantP {
				t.Fatalf("%s: members %q", tc.url, ms)
			}
			room, err := strconv.ParseUint(string(ms[2].value), 10, 64)
			if err != nil || room >= 1<<63 || int(room%uint64(tc.dp)) != tc.rank%tc.dp {
				t.Fatalf("%s: room %s for local rank %d of %d", tc.url, ms[2].value, tc.rank%tc.dp, tc.dp)
			}
		}
	}
}

// TestTransferParams: only an object is taken from a prefill's answer.
func TestTransferParams(t *testing.T) {
	for body, want := range map[string]string{
		`{"choices":[],"kv_transfer_params":{"remote_host":"h","remote_block_ids":[18446744073709551615]}}`: `{"remote_host":"h","remote_block_ids":[18446744073709551615]}`,
		`{"choices":[],"kv_transfer_params":null}`:                                                          "",
		`{"choices":[]}`: "",
		`not json`:       "",
	} {
		if got := string(transferParams([]byte(body))); got != want {
			t.Errorf("%s: %q, want %q", body, got, want)
		}
	}
	if strings.Contains(string(dropOwned([]byte(`{"a":1}`))), "kv") {
		t.Fatal("dropOwned added something")
	}
}
