package frontdoor

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"kvrouter/internal/hints"
	"kvrouter/internal/router"
	"kvrouter/internal/tokenizer"
)

// benchChat is a chat request of about 8k tokens of varied text.
func benchChat(b *testing.B) []byte {
	words := strings.Fields("the router weighs cache overlap against load and tells the chosen worker where to pull the rest of its prefix from while the engines keep decoding tokens for everyone else in the fleet")
	var sb strings.Builder
	for i := 0; sb.Len() < 40000; i++ {
		sb.WriteString(words[(i*7)%len(words)])
		sb.WriteByte(' ')
	}
	body, err := json.Marshal(map[string]any{"model": "m", "stream": true, "messages": []map[string]string{
		{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": sb.String()}}})
	if err != nil {
		b.Fatal(err)
	}
	return body
}

// BenchmarkFrontDoor measures what a request costs the router before and
// after the decision: strip, parse, chat template and tokenization
// (tokenize), the same for a completion sent as token ids (ids), then the
// forwarded body with a hint, the DP rank and the usage request (body).
func BenchmarkFrontDoor(b *testing.B) {
	s := &Server{Tok: &Local{Model: tokenizer.Demo()}, Metrics: NewMetrics(prometheus.NewRegistry(), nil), Log: quiet()}
	body := benchChat(b)
	req := httptest.NewRequest("POST", "/v1/chat/completions", nil)
	p, aerr := s.prepare(req, body, KindChat, nil)
	if aerr != nil {
		b.Fatal(aerr)
	}
	hashes := make([]uint64, 256)
	for i := range hashes {
		hashes[i] = uint64(i) * 0x9e3779b97f4a7c15
	}
	d := &router.Decision{Target: router.Target{Worker: router.Worker{Engine: router.EngineSGLang, Placement: hints.PlaceSGLang}},
		Hint: hints.Hint{Endpoint: "tcp://10.0.0.7:25000", BlockHashes: hashes}}
	d.HintDecision.Reason = hints.ReasonHinted
	b.Run("tokenize", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if _, aerr := s.prepare(req, body, KindChat, nil); aerr != nil {
				b.Fatal(aerr)
			}
		}
		b.ReportMetric(float64(len(p.tokens)), "tokens")
	})
	// A completion sent as token ids, as a front end that tokenizes
	// itself sends it: 1,536 ids.
	ids := make([]uint32, 1536)
	for i := range ids {
		ids[i] = uint32(i*7919) % 150000
	}
	idsBody, err := json.Marshal(map[string]any{"model": "m", "prompt": ids, "max_tokens": 1})
	if err != nil {
		b.Fatal(err)
	}
	idsReq := httptest.NewRequest("POST", "/v1/completions", nil)
	b.Run("ids", func(b *testing.B) {
		b.SetBytes(int64(len(idsBody)))
		for b.Loop() {
			if _, aerr := s.prepare(idsReq, idsBody, KindCompletion, nil); aerr != nil {
				b.Fatal(aerr)
			}
		}
	})
	// The usual forward: no hint, the SGLang DP rank appended to an ids
	// prompt.
	idsP, aerr := s.prepare(idsReq, idsBody, KindCompletion, nil)
	if aerr != nil {
		b.Fatal(aerr)
	}
	plain := &router.Decision{Target: d.Target, HintDecision: hints.Decision{Reason: hints.ReasonDisabled}}
	b.Run("ids-body", func(b *testing.B) {
		b.SetBytes(int64(len(idsBody)))
		for b.Loop() {
			if _, err := upstreamBody(idsP, plain); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("body", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if _, err := upstreamBody(p, d); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkReadBody reads a 9.6 KB body (1,536 token ids) whose length
// the client announced, as the front door does for every request.
func BenchmarkReadBody(b *testing.B) {
	ids := make([]uint32, 1536)
	for i := range ids {
		ids[i] = uint32(i*7919) % 150000
	}
	body, err := json.Marshal(map[string]any{"model": "m", "prompt": ids})
	if err != nil {
		b.Fatal(err)
	}
	s := &Server{}
	w := httptest.NewRecorder()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest("POST", "/v1/completions", bytes.NewReader(body))
		got, held, aerr := s.readBody(w, r, nil)
		if aerr != nil || len(got) != len(body) {
			b.Fatal(aerr)
		}
		s.releaseBody(held)
	}
}
