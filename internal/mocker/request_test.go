package mocker

import (
	"errors"
	"slices"
	"testing"

	"kvrouter/internal/tokenizer"
)

func testParser(t testing.TB, flavor Flavor) *parser {
	t.Helper()
	cfg := Config{Flavor: flavor, BlockSize: 4, MaxModelLen: 64}
	cfg.setDefaults()
	m, err := cfg.model()
	if err != nil {
		t.Fatal(err)
	}
	return &parser{cfg: &cfg, model: m}
}

const envelope = `{"protocol_version":"0.1","message_id":"m","actions":[{"action_id":"a1","action_type":"kv.fetch","action_version":"1.0","payload":{"source_control_endpoint":"tcp://10.0.0.7:25000","block_hashes":[1,2]}}]}`
const flat = `{"source_control_endpoint":"tcp://10.0.0.7:25000","block_hashes":[1]}`

func TestParseCompletion(t *testing.T) {
	cases := []struct {
		name   string
		flavor Flavor
		body   string
		err    error
		tokens []uint32 // nil: not checked
		max    int
		hint   string
		rank   int // -1: none
		stream bool
		usage  bool
		salt   string
	}{
		{name: "token ids", body: `{"prompt":[1,2,3],"max_tokens":5}`, tokens: []uint32{1, 2, 3}, max: 5, rank: -1},
		{name: "batch of one", body: `{"prompt":[[7,8]]}`, tokens: []uint32{7, 8}, max: DefaultMaxTokens, rank: -1},
		{name: "text", body: `{"prompt":"Hello world","model":"kvrouter-demo"}`, max: DefaultMaxTokens, rank: -1},
		{name: "stream with usage", body: `{"prompt":[1],"stream":true,"stream_options":{"include_usage":true}}`, max: DefaultMaxTokens, rank: -1, stream: true, usage: true},
		{name: "rank and salt", body: `{"prompt":[1],"dp_rank":1,"cache_salt":"tenant-a"}`, max: DefaultMaxTokens, rank: 1, salt: "tenant-a"},
		{name: "sglang rank field", body: `{"prompt":[1],"data_parallel_rank":2}`, max: DefaultMaxTokens, rank: 2},
		{name: "sglang envelope", flavor: SGLang, body: `{"prompt":[1],"kv_hints":` + envelope + `}`, max: DefaultMaxTokens, rank: -1, hint: envelope},
		{name: "sglang legacy", flavor: SGLang, body: `{"prompt":[1],"kv_router_hint":` + flat + `}`, max: DefaultMaxTokens, rank: -1, hint: flat},
		{name: "sglang current wins", flavor: SGLang, body: `{"prompt":[1],"kv_router_hint":` + flat + `,"kv_hints":` + envelope + `}`, max: DefaultMaxTokens, rank: -1, hint: envelope},
		{name: "sglang ignores vllm placement", flavor: SGLang, body: `{"prompt":[1],"kv_transfer_params":{"kv_hint":` + envelope + `}}`, max: DefaultMaxTokens, rank: -1},
		{name: "vllm envelope", flavor: VLLM, body: `{"prompt":[1],"kv_transfer_params":{"kv_hint":` + envelope + `}}`, max: DefaultMaxTokens, rank: -1, hint: envelope},
		{name: "vllm legacy", flavor: VLLM, body: `{"prompt":[1],"kv_transfer_params":{"router_hint":` + flat + `,"kv_hint":null}}`, max: DefaultMaxTokens, rank: -1, hint: flat},
		{name: "vllm ignores sglang placement", flavor: VLLM, body: `{"prompt":[1],"kv_hints":` + envelope + `}`, max: DefaultMaxTokens, rank: -1},
		{name: "null hint", flavor: SGLang, body: `{"prompt":[1],"kv_hints":null}`, max: DefaultMaxTokens, rank: -1},
		{name: "other model", body: `{"prompt":[1],"model":"gpt-4"}`, err: errModelNotFound},
		{name: "no prompt", body: `{"max_tokens":3}`, err: errBadRequest},
		{name: "empty ids", body: `{"prompt":[]}`, err: errBadRequest},
		{name: "out of vocabulary", body: `{"prompt":[1,100000]}`, err: errBadRequest},
		{name: "negative id", body: `{"prompt":[-1]}`, err: errBadRequest},
		{name: "batch of two", body: `{"prompt":["a","b"]}`, err: errBadRequest},
		{name: "zero max tokens", body: `{"prompt":[1],"max_tokens":0}`, err: errBadRequest},
		{name: "n of two", body: `{"prompt":[1],"n":2}`, err: errBadRequest},
		{name: "too long", body: `{"prompt":[1,2,3],"max_tokens":62}`, err: errBadRequest},
		{name: "not json", body: `{"prompt":`, err: errBadRequest},
		{name: "prompt object", body: `{"prompt":{"a":1}}`, err: errBadRequest},
		{name: "bad params type", flavor: VLLM, body: `{"prompt":[1],"kv_transfer_params":[1]}`, err: errBadRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			flavor := c.flavor
			if flavor == "" {
				flavor = SGLang
			}
			got, err := testParser(t, flavor).completion([]byte(c.body))
			if c.err != nil || err != nil {
				if !errors.Is(err, c.err) {
					t.Fatalf("error %v, want %v", err, c.err)
				}
				return
			}
			if c.tokens != nil && !slices.Equal(got.tokens, c.tokens) {
				t.Errorf("tokens %v, want %v", got.tokens, c.tokens)
			}
			if len(got.tokens) == 0 {
				t.Error("no tokens")
			}
			rank := -1
			if got.dpRank != nil {
				rank = *got.dpRank
			}
			if got.maxTokens != c.max || string(got.hint) != c.hint || rank != c.rank ||
				got.stream != c.stream || got.includeUsage != c.usage || got.salt != c.salt {
				t.Errorf("got max %d hint %q rank %d stream %v usage %v salt %q", got.maxTokens, got.hint, rank, got.stream, got.includeUsage, got.salt)
			}
		})
	}
}

func TestParseChat(t *testing.T) {
	p := testParser(t, SGLang)
	msgs := []tokenizer.Message{{Role: "user", Content: "Hi there"}}
	text, err := tokenizer.ChatML{}.Render(msgs, true)
	if err != nil {
		t.Fatal(err)
	}
	want := tokenizer.Default().Encode(text, false)
	cases := []struct {
		name   string
		body   string
		err    error
		tokens []uint32
		max    int
	}{
		{"string content", `{"messages":[{"role":"user","content":"Hi there"}],"max_tokens":3}`, nil, want, 3},
		{"content parts", `{"messages":[{"role":"user","content":[{"type":"text","text":"Hi there"}]}]}`, nil, want, DefaultMaxTokens},
		{"max completion tokens wins", `{"messages":[{"role":"user","content":"Hi there"}],"max_tokens":3,"max_completion_tokens":4}`, nil, want, 4},
		{"no messages", `{"messages":[]}`, errBadRequest, nil, 0},
		{"no role", `{"messages":[{"content":"x"}]}`, errBadRequest, nil, 0},
		{"image part", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, errBadRequest, nil, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := p.chat([]byte(c.body))
			if c.err != nil || err != nil {
				if !errors.Is(err, c.err) {
					t.Fatalf("error %v, want %v", err, c.err)
				}
				return
			}
			if !slices.Equal(got.tokens, c.tokens) || got.maxTokens != c.max {
				t.Fatalf("tokens %v max %d, want %v %d", got.tokens, got.maxTokens, c.tokens, c.max)
			}
		})
	}
}

func TestParseTokenizeAndEvict(t *testing.T) {
	p := testParser(t, SGLang)
	toks, err := p.tokenize([]byte(`{"prompt":"Hello world"}`))
	if err != nil || !slices.Equal(toks, p.model.Tok.Encode("Hello world", true)) {
		t.Fatalf("tokenize prompt: %v %v", toks, err)
	}
	chat, err := p.tokenize([]byte(`{"messages":[{"role":"user","content":"Hi there"}]}`))
	if err != nil || len(chat) == 0 {
		t.Fatalf("tokenize messages: %v %v", chat, err)
	}
	for _, bad := range []string{`{}`, `{"prompt":"a","messages":[]}`, `[`, `{"model":"x","prompt":"a"}`} {
		if _, err := p.tokenize([]byte(bad)); err == nil {
			t.Errorf("tokenize %s: no error", bad)
		}
	}

	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	keys := p.cfg.engineHashes(tokens, "", "")
	cases := []struct {
		body        string
		gpu, runner bool
		keys        []uint64 // nil: everything
		err         bool
	}{
		{``, true, true, nil, false},
		{`{"tier":"gpu"}`, true, false, nil, false},
		{`{"tier":"runner","tokens":[1,2,3,4,5,6,7,8,9]}`, false, true, keys, false},
		{`{"tier":"all","tokens":[1,2]}`, true, true, []uint64{}, false},
		{`{"tier":"disk"}`, false, false, nil, true},
		{`{"prompt":"a","tokens":[1]}`, false, false, nil, true},
	}
	for _, c := range cases {
		got, err := p.evict([]byte(c.body))
		if (err != nil) != c.err {
			t.Fatalf("evict %s: error %v", c.body, err)
		}
		if err != nil {
			continue
		}
		if got.gpu != c.gpu || got.runner != c.runner || (got.keys == nil) != (c.keys == nil) || !slices.Equal(got.keys, c.keys) {
			t.Errorf("evict %s: got %+v", c.body, got)
		}
	}
}
