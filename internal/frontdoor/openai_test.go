package frontdoor

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"kvrouter/internal/hints"
	"kvrouter/internal/router"
	"kvrouter/internal/tokenizer"
)

func TestParseRequest(t *testing.T) {
	tests := []struct {
		name string
		kind Kind
		body string
		err  string // substring of the error; "" for success
		want Request
	}{
		{name: "text prompt", kind: KindCompletion, body: `{"model":"m","prompt":"hi","cache_salt":"s","stream":true}`,
			want: Request{Model: "m", Prompt: "hi", Salt: "s", Stream: true, AddGenerationPrompt: true}},
		{name: "token ids", kind: KindCompletion, body: `{"model":"m","prompt":[1,4294967295,0]}`,
			want: Request{Model: "m", Tokens: []uint32{1, 1<<32 - 1, 0}, HasTokens: true, AddGenerationPrompt: true}},
		{name: "batch of strings routes by the first", kind: KindCompletion, body: `{"model":"m","prompt":["a","b"]}`,
			want: Request{Model: "m", Prompt: "a", AddGenerationPrompt: true}},
		{name: "batch of token lists", kind: KindCompletion, body: `{"model":"m","prompt":[[7,8],[9]]}`,
			want: Request{Model: "m", Tokens: []uint32{7, 8}, HasTokens: true, AddGenerationPrompt: true}},
		{name: "usage asked", kind: KindCompletion, body: `{"model":"m","prompt":"x","stream":true,"stream_options":{"include_usage":true}}`,
			want: Request{Model: "m", Prompt: "x", Stream: true, IncludeUsage: true, AddGenerationPrompt: true}},
		{name: "chat with content parts", kind: KindChat,
			body: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"add_generation_prompt":false}`,
			want: Request{Kind: KindChat, Model: "m", Messages: []tokenizer.Message{{Role: "user", Content: "a\nb"}},
				RawMessages: json.RawMessage(`[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]`)}},
		{name: "chat with an image routes on load", kind: KindChat,
			body: `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`,
			want: Request{Kind: KindChat, Model: "m", AddGenerationPrompt: true,
				RawMessages: json.RawMessage(`[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]`)}},
		{name: "model missing", kind: KindCompletion, body: `{"prompt":"x"}`, err: "model is required"},
		{name: "model not a string", kind: KindCompletion, body: `{"model":3,"prompt":"x"}`, err: "model: want a string"},
		{name: "token id too large", kind: KindCompletion, body: `{"model":"m","prompt":[4294967296]}`, err: "prompt[0] = 4294967296"},
		{name: "token id fractional", kind: KindCompletion, body: `{"model":"m","prompt":[1.5]}`, err: "prompt[0] = 1.5"},
		{name: "empty prompt list", kind: KindCompletion, body: `{"model":"m","prompt":[]}`, err: "prompt is empty"},
		{name: "prompt object", kind: KindCompletion, body: `{"model":"m","prompt":{}}`, err: "prompt: want"},
		{name: "stream not a bool", kind: KindCompletion, body: `{"model":"m","prompt":"x","stream":"yes"}`, err: "stream: want true or false"},
		{name: "bad stream_options", kind: KindCompletion, body: `{"model":"m","prompt":"x","stream_options":[]}`, err: "stream_options"},
		{name: "salt not a string", kind: KindCompletion, body: `{"model":"m","prompt":"x","cache_salt":1}`, err: "cache_salt"},
		{name: "message without role", kind: KindChat, body: `{"model":"m","messages":[{"content":"x"}]}`, err: "messages[0].role"},
		{name: "empty messages", kind: KindChat, body: `{"model":"m","messages":[]}`, err: "messages is empty"},
		{name: "trailing data", kind: KindCompletion, body: `{"model":"m","prompt":"x"}}`, err: "not valid JSON"},
		{name: "keys are case-sensitive", kind: KindCompletion, body: `{"Model":"m","prompt":"x"}`, err: "model is required"},
		{name: "not an object", kind: KindCompletion, body: `[1]`, err: "not a JSON object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseRequest(tc.kind, []byte(tc.body))
			if tc.err != "" {
				if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want ErrBadRequest containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got.top = nil // the body's members, for edits: not the request's meaning
			if !reflect.DeepEqual(*got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", *got, tc.want)
			}
		})
	}
}

// FuzzParseRequest: any body either parses into something routable or is
// refused with ErrBadRequest; the body edits the router makes keep a
// parsable body parsable and the same to routing.
func FuzzParseRequest(f *testing.F) {
	f.Add(false, []byte(`{"model":"m","prompt":"hello"}`))
	f.Add(false, []byte(`{"model":"m","prompt":[1,2,3],"stream":true,"stream_options":{"include_usage":false}}`))
	f.Add(true, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"kv_hints":{"actions":[]}}`))
	f.Fuzz(func(t *testing.T, chat bool, body []byte) {
		kind := KindCompletion
		if chat {
			kind = KindChat
		}
		req, err := parseRequest(kind, body)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("error without ErrBadRequest: %v", err)
			}
			return
		}
		if req.Model == "" {
			t.Fatal("parsed without a model")
		}
		if kind == KindChat && req.RawMessages == nil {
			t.Fatal("chat without messages")
		}
		edited, err := setMember(body, keyDataParallelRank, []byte("3"))
		if err != nil {
			t.Fatalf("setMember on a parsed body: %v", err)
		}
		if req.Stream {
			if edited, err = withUsage(edited); err != nil {
				t.Fatalf("withUsage on a parsed body: %v", err)
			}
		}
		again, err := parseRequest(kind, edited)
		if err != nil {
			t.Fatalf("edited body no longer parses: %v\n%s", err, edited)
		}
		if again.Model != req.Model || again.Prompt != req.Prompt || !slices.Equal(again.Tokens, req.Tokens) ||
			again.Salt != req.Salt || again.Stream != req.Stream || !reflect.DeepEqual(again.Messages, req.Messages) {
			t.Fatalf("edit changed the request:\n%+v\n%+v", req, again)
		}
		if req.Stream && !again.IncludeUsage {
			t.Fatal("usage not asked for")
		}
	})
}

func TestSetMember(t *testing.T) {
	tests := []struct {
		name, body, key, value, want string
	}{
		{"append", `{"a":1}`, "k", "2", `{"a":1,"k":2}`},
		{"empty object", ` { } `, "k", "2", ` {"k":2} `},
		{"replace every duplicate", `{"k":1,"a":[1,{"k":3}],"k":"x"}`, "k", "true", `{"a":[1,{"k":3}],"k":true}`},
		{"escaped key", `{"\u006b":1, "b" : 1e400}`, "k", "null", `{"b" : 1e400,"k":null}`},
		{"only the key", `{"k":{"x":1}}`, "k", "0", `{"k":0}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := setMember([]byte(tc.body), tc.key, []byte(tc.value))
			if err != nil || string(got) != tc.want {
				t.Fatalf("got %s (%v), want %s", got, err, tc.want)
			}
		})
	}
	for _, bad := range []string{`[1]`, `{"a":`, `"s"`} {
		if _, err := setMember([]byte(bad), "k", []byte("1")); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: err = %v", bad, err)
		}
	}
	got, err := withUsage([]byte(`{"stream_options":{"continuous_usage_stats":true,"include_usage":false},"stream":true}`))
	if err != nil || string(got) != `{"stream":true,"stream_options":{"continuous_usage_stats":true,"include_usage":true}}` {
		t.Fatalf("withUsage: %s %v", got, err)
	}
}

// FuzzSetMember: on any JSON object, setMember leaves every other member
// as it was and the key holding the value.
func FuzzSetMember(f *testing.F) {
	f.Add([]byte(`{"a":1,"k":2}`), "k")
	f.Add([]byte(` {"\u006b" : [1, "}"] ,"b":"\""}`), "k")
	f.Add([]byte(`{}`), "data_parallel_rank")
	f.Fuzz(func(t *testing.T, body []byte, key string) {
		var before map[string]json.RawMessage
		if json.Unmarshal(body, &before) != nil || before == nil {
			return
		}
		keyJSON, _ := json.Marshal(key)
		var k string
		if json.Unmarshal(keyJSON, &k) != nil || k != key {
			return // not representable as a JSON key
		}
		out, err := setMember(body, key, []byte(`{"v":7}`))
		if err != nil {
			t.Fatalf("setMember: %v", err)
		}
		var after map[string]json.RawMessage
		if err := json.Unmarshal(out, &after); err != nil {
			t.Fatalf("invalid result %s: %v", out, err)
		}
		if string(after[key]) != `{"v":7}` {
			t.Fatalf("key holds %s in %s", after[key], out)
		}
		delete(before, key)
		delete(after, key)
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("other members changed:\n%s\n%s", body, out)
		}
	})
}

// TestFlatten: the fast path reads content exactly as FlattenContent does.
func TestFlatten(t *testing.T) {
	for _, raw := range []string{`"plain text"`, `""`, `"tab\there"`, `"\u00e9t\u00e9"`, `"caf` + "\u00e9" + `"`, `"bad ` + "\xff" + `"`,
		`null`, `[{"type":"text","text":"a"},{"type":"text","text":"b"}]`, `[{"type":"image_url"}]`, `3`} {
		got, err := flatten(json.RawMessage(raw))
		want, werr := tokenizer.FlattenContent(json.RawMessage(raw))
		if got != want || (err == nil) != (werr == nil) {
			t.Errorf("%s: %q %v, want %q %v", raw, got, err, want, werr)
		}
	}
}

// TestTokenIDsFastPath: the one-pass reader of plain ids agrees with the
// decoder on every list, ids and errors alike.
func TestTokenIDsFastPath(t *testing.T) {
	cases := []string{
		`[]`, `[ ]`, `[0]`, `[1,2,3]`, `[1 ,2]`, "[1,\n2, 3]", `[1,0,2]`, `[4294967295,1]`, `[9999999999]`, `[12345678901]`, " [ 1 ,\n2\t, 3 ] ", `[4294967295]`, `[4294967296]`, `[99999999999999999999999]`,
		`[1.0]`, `[1e2]`, `[1E2]`, `[-0]`, `[-1]`, `[1,2.5]`, `[1,"a"]`, `["a"]`, `[[1]]`, `[1,[2]]`, `[null]`, `[true]`, `{}`, `"x"`,
	}
	// Long lists, which the word-at-a-time loops read: every id length,
	// as Go and Python separate them and otherwise.
	ids := []string{"0", "7", "10", "305", "4096", "65535", "100000", "1234567", "12345678", "123456789", "4294967295", "0", "4294967296", "5"}
	for _, sep := range []string{",", ", ", " ,", ",  ", ",\n", ", -1, ", ", 1.5, ", `, "a", `} {
		for skip := range ids {
			list := "[" + strings.Join(ids[skip:], sep) + sep + strings.Join(ids[:skip], ", ") + "]"
			list = strings.Replace(list, sep+"]", "]", 1)
			cases = append(cases, list, list+"}")
		}
	}
	for _, raw := range cases {
		want, wantErr := decodeTokenIDs(json.RawMessage(raw), "prompt")
		got, err := tokenIDs(json.RawMessage(raw), "prompt")
		if fmt.Sprint(got, err) != fmt.Sprint(want, wantErr) || (got == nil) != (want == nil) {
			t.Errorf("%s: got %v %v, want %v %v", raw, got, err, want, wantErr)
		}
	}
}

// TestDigitRun: the word-at-a-time reader finds a digit run's end and
// value for every length and whatever byte follows, as the byte loop does.
func TestDigitRun(t *testing.T) {
	for n := 0; n <= 8; n++ {
		for _, next := range []byte{',', ']', ' ', '.', 'e', '/', ':', 0x00, 0x7F, 0x80, 0xF4, 0xFF} {
			digits := strconv.Itoa(98765432)[:n]
			b := append([]byte(digits), next, '1', '2', '3', '4', '5', '6', '7', '8')
			w := binary.LittleEndian.Uint64(b)
			if got := digitRun(w); got != n {
				t.Fatalf("digitRun(%q) = %d, want %d", b[:8], got, n)
			}
			if n == 0 {
				continue
			}
			want, _ := strconv.ParseUint(digits, 10, 32)
			if got := eightDigits(w << (64 - 8*n)); uint64(got) != want {
				t.Fatalf("eightDigits(%q) = %d, want %d", digits, got, want)
			}
		}
	}
}

// FuzzTokenIDs: the one-pass reader of plain ids agrees with the decoder on
// any list it accepts, and leaves to it whatever it does not.
func FuzzTokenIDs(f *testing.F) {
	for _, s := range []string{`[1,2,3]`, `[1, 22, 333, 4444, 55555, 666666, 7777777, 88888888, 0, 10]`, `[1234567,12345678,123456789,4294967295]`, "[0 ,\n7]", `[4294967296]`, `[1.5,2]`, `[01]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return // tokenIDs reads parts of documents already validated
		}
		want, wantErr := decodeTokenIDs(json.RawMessage(raw), "prompt")
		got, err := tokenIDs(json.RawMessage(raw), "prompt")
		if fmt.Sprint(got, err) != fmt.Sprint(want, wantErr) || (got == nil) != (want == nil) {
			t.Fatalf("%q: got %v %v, want %v %v", raw, got, err, want, wantErr)
		}
	})
}

// BenchmarkTokenIDs reads a 1,536-token prompt of ids (`kvrouter bench
// router`'s default), separated as Go's encoding/json and Python's
// json.dumps write them.
func BenchmarkTokenIDs(b *testing.B) {
	for _, sep := range []string{",", ", "} {
		raw := []byte("[")
		for i := range 1536 {
			if i > 0 {
				raw = append(raw, sep...)
			}
			raw = strconv.AppendUint(raw, uint64(1000+i*7919%100_000), 10)
		}
		raw = append(raw, ']')
		b.Run(fmt.Sprintf("sep=%q", sep), func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if _, err := tokenIDs(raw, "prompt"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzParseClean: the one-pass reading of a body, when it answers, answers
// as stripping and parsing it in full does; it declines bodies with
// anything to strip.
func FuzzParseClean(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","prompt":[1,2,3]}`, `{"model":"m","prompt":[01]}`, `{"model":"m","prompt":[1],"prompt":[2,3]}`,
		`{"model":"m","prompt":[[1,2],[3]]}`, `{"model":"m","prompt":"hi","kv_hints":{}}`, `{"model":"m","prompt":[1, 2 ,3 ] , "stream":true}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`, `{"model":"m","prompt":[4294967296]}`, `{"model":"m","prompt":[1,2,]}`,
	} {
		f.Add(false, []byte(s))
	}
	f.Add(true, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"kv_transfer_params":null}`))
	f.Fuzz(func(t *testing.T, chat bool, body []byte) {
		kind := KindCompletion
		if chat {
			kind = KindChat
		}
		got, ok := parseClean(kind, body, nil)
		// Over a pooled buffer an earlier request left ids in, the
		// same request.
		used := []uint32{9, 9, 9, 9, 9, 9, 9, 9, 9}
		again, okAgain := parseClean(kind, body, used[:5])
		if okAgain != ok || !reflect.DeepEqual(again, got) {
			t.Fatalf("%q: parseClean over a used buffer %+v (%v), over none %+v (%v)", body, again, okAgain, got, ok)
		}
		if !ok {
			return
		}
		stripped, changed, err := hints.Strip(body)
		if err != nil || changed {
			t.Fatalf("parseClean took %q, which Strip %v (changed %v)", body, err, changed)
		}
		want, err := parseValid(kind, stripped)
		if err != nil {
			t.Fatalf("parseClean took %q, which parseValid refuses: %v", body, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\nparseClean %+v\nparseValid %+v", body, got, want)
		}
	})
}

func TestParseCleanTakes(t *testing.T) {
	for body, want := range map[string]bool{
		`{"model":"m","prompt":[1,2,3],"max_tokens":4}`: true,
		` {"model":"m","prompt": [ 1 , 2 ] } `:          true,
		`{"model":"m","prompt":"hello"}`:                true,
		`{"model":"m","prompt":[1,2,3],"kv_hints":{}}`:  false, // Strip's to remove
		`{"model":"m","prompt":[01]}`:                   false, // not JSON
		`{"model":"m","prompt":[1,2,3]`:                 false,
		`{"prompt":[1,2,3]}`:                            false, // no model: the full path says so
	} {
		req, ok := parseClean(KindCompletion, []byte(body), nil)
		if ok != want {
			t.Errorf("%s: ok = %v, want %v", body, ok, want)
		}
		if ok && req.HasTokens && !slices.Equal(req.Tokens, []uint32{1, 2, 3}[:len(req.Tokens)]) {
			t.Errorf("%s: tokens %v", body, req.Tokens)
		}
	}
}

// TestUpstreamBody: the forwarded body carries the DP rank and the usage
// request whether the members are appended (none was there) or edited in
// place of the client's, and means what the full edit would.
func TestUpstreamBody(t *testing.T) {
	s := &Server{Tok: &Local{Model: tokenizer.Demo()}, Metrics: NewMetrics(prometheus.NewRegistry(), nil), Log: quiet()}
	d := &router.Decision{Target: router.Target{Rank: 3, Worker: router.Worker{Engine: router.EngineSGLang, DPStart: 2, Placement: hints.PlaceSGLang}},
		HintDecision: hints.Decision{Reason: hints.ReasonDisabled}}
	for _, body := range []string{
		`{"model":"m","prompt":[1,2,3]}`,
		" {\"model\":\"m\" , \"prompt\":[1,2,3]}\n ",
		`{"model":"m","prompt":[1,2,3],"data_parallel_rank":7}`,
		`{"model":"m","prompt":[1,2,3],"\u0064ata_parallel_rank":7}`,
		`{"model":"m","prompt":"hi","stream":true}`,
		`{"model":"m","prompt":"hi","stream":true,"stream_options":{"continuous_usage_stats":true}}`,
		`{"model":"m","prompt":"hi","stream":true,"stream_options":null}`,
	} {
		p, aerr := s.prepare(httptest.NewRequest("POST", "/v1/completions", nil), []byte(body), KindCompletion, nil)
		if aerr != nil {
			t.Fatalf("%s: %v", body, aerr)
		}
		got, err := upstreamBody(p, d)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		var m map[string]any
		if err := json.Unmarshal(got, &m); err != nil {
			t.Fatalf("%s: forwarded %s: %v", body, got, err)
		}
		if m["data_parallel_rank"] != 1.0 {
			t.Errorf("%s: forwarded %s: want data_parallel_rank 1", body, got)
		}
		if p.req.Stream {
			if so, _ := m["stream_options"].(map[string]any); so["include_usage"] != true {
				t.Errorf("%s: forwarded %s: want include_usage", body, got)
			}
		}
		// The full edit says the same.
		p.req.top = nil
		full, err := upstreamBody(p, d)
		if err != nil {
			t.Fatal(err)
		}
		var want map[string]any
		if err := json.Unmarshal(full, &want); err != nil || !reflect.DeepEqual(m, want) {
			t.Errorf("%s: appended %s, edited %s", body, got, full)
		}
	}
}

// TestCopyHeaders: end-to-end fields pass, hop-by-hop ones and those the
// Connection field names do not.
func TestCopyHeaders(t *testing.T) {
	src := http.Header{
		"Connection":    {"x-secret, Upgrade", "close"},
		"X-Secret":      {"s"},
		"Upgrade":       {"h2c"},
		"Keep-Alive":    {"timeout=5"},
		"Te":            {"trailers"},
		"Authorization": {"Bearer t"},
		"X-Request-Id":  {"r1", "r2"},
	}
	dst := http.Header{"X-Kept": {"k"}}
	copyHeaders(dst, src)
	want := http.Header{"X-Kept": {"k"}, "Authorization": {"Bearer t"}, "X-Request-Id": {"r1", "r2"}}
	if !reflect.DeepEqual(dst, want) {
		t.Fatalf("copied %v, want %v", dst, want)
	}
	// Replacing a field in the copy leaves the source alone.
	dst.Set("Authorization", "other")
	if src.Get("Authorization") != "Bearer t" {
		t.Fatalf("source changed: %v", src)
	}
}
