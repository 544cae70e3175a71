package frontdoor

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestRelaySSE(t *testing.T) {
	long := strings.Repeat("x", 100<<10)
	broken := errors.New("connection reset")
	tests := []struct {
		name, in, want string
		broken         bool // the stream breaks after in
		err            error
		drop           bool
		firsts         int
		usage          []int // cached tokens reported
	}{
		{name: "events pass through", in: "data: a\n\n: comment\n\ndata: b\n\n", want: "data: a\n\n: comment\n\ndata: b\n\n", firsts: 1},
		{name: "CRLF and multi-line data", in: "event: x\r\ndata: 1\r\ndata: 2\r\n\r\n", want: "event: x\r\ndata: 1\r\ndata: 2\r\n\r\n", firsts: 1},
		{name: "a line longer than the buffer", in: "data: " + long + "\n\n", want: "data: " + long + "\n\n", firsts: 1},
		{name: "usage kept when asked",
			in:     "data: {\"choices\":[{}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens_details\":{\"cached_tokens\":3}}}\n\ndata: [DONE]\n\n",
			want:   "data: {\"choices\":[{}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens_details\":{\"cached_tokens\":3}}}\n\ndata: [DONE]\n\n",
			firsts: 1, usage: []int{3}},
		{name: "usage dropped when not asked", drop: true,
			in:   "data: {\"choices\":[{}],\"usage\":null}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens_details\":{\"cached_tokens\":3}}}\n\ndata: [DONE]\n\n",
			want: "data: {\"choices\":[{}],\"usage\":null}\n\ndata: [DONE]\n\n", firsts: 1, usage: []int{3}},
		{name: "an event the stream ends in is dropped", in: "data: y\n\ndata: z", want: "data: y\n\n", err: errCutEvent, firsts: 1},
		{name: "a line without its blank line is dropped", in: "data: y\n\ndata: z\n", want: "data: y\n\n", err: errCutEvent, firsts: 1},
		{name: "broken mid-JSON", in: "data: {\"a\":1}\n\ndata: {\"b\"", broken: true, want: "data: {\"a\":1}\n\n", err: broken, firsts: 1},
		{name: "broken at an event's end", in: "data: a\n\n", broken: true, want: "data: a\n\n", err: broken, firsts: 1},
		{name: "broken before any event", in: "data: {", broken: true, err: broken},
		{name: "no data at all", in: ": ping\n\n", want: ": ping\n\n"},
		{name: "empty", in: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			firsts, starts := 0, 0
			var cached []int
			var in io.Reader = strings.NewReader(tc.in)
			if tc.broken {
				in = io.MultiReader(in, iotest.ErrReader(broken))
			}
			start := func() {
				if starts++; w.Body.Len() > 0 {
					t.Fatal("start after a write")
				}
			}
			err := relaySSE(w, in, tc.drop, start, func() { firsts++ }, func(u *usage) {
				n := -1
				if u.Details != nil {
					n = u.Details.CachedTokens
				}
				cached = append(cached, n)
			})
			if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) || w.Body.String() != tc.want || firsts != tc.firsts ||
				!reflect.DeepEqual(cached, tc.usage) {
				t.Fatalf("err %v firsts %d usage %v\n got %.200q\nwant %.200q", err, firsts, cached, w.Body.String(), tc.want)
			}
			// The head goes out with the first event, or alone at the
			// clean end of an empty stream; never for a stream that
			// broke before any event.
			if wantStart := tc.want != "" || tc.err == nil; (starts == 1) != wantStart || starts > 1 {
				t.Fatalf("start ran %d times", starts)
			}
		})
	}
}

func TestLRU(t *testing.T) {
	c := newLRU(2)
	c.put("a", []uint32{1})
	c.put("b", []uint32{2})
	c.get("a") // b is now the least recent
	c.put("c", []uint32{3})
	if _, ok := c.get("b"); ok {
		t.Fatal("b not evicted")
	}
	for k, want := range map[string]uint32{"a": 1, "c": 3} {
		if got, ok := c.get(k); !ok || got[0] != want {
			t.Fatalf("%s: %v %v", k, got, ok)
		}
	}
}

// TestEngineTokenizer asks a worker's /tokenize once per distinct request.
func TestEngineTokenizer(t *testing.T) {
	var asked atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /tokenize", func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		var b struct {
			Prompt string `json:"prompt"`
		}
		json.NewDecoder(r.Body).Decode(&b)
		// One token per byte, offset so ids are not ASCII by accident.
		toks := make([]uint32, len(b.Prompt))
		for i := range b.Prompt {
			toks[i] = 1000 + uint32(b.Prompt[i])
		}
		json.NewEncoder(w).Encode(map[string]any{"tokens": toks, "count": len(toks)})
	})
	e := httptest.NewServer(mux)
	t.Cleanup(e.Close)
	tok := NewEngine(&http.Client{}, func(string) []EngineTarget {
		return []EngineTarget{{URL: "http://127.0.0.1:1", Chats: true}, {URL: e.URL, Chats: true}}
	}, 8)
	ctx := context.Background()
	req := &Request{Kind: KindCompletion, Model: "demo", Prompt: "ab"}
	for range 3 {
		got, err := tok.Tokenize(ctx, req)
		if err != nil || !reflect.DeepEqual(got, []uint32{1000 + 'a', 1000 + 'b'}) {
			t.Fatalf("%v %v", got, err)
		}
	}
	if n := asked.Load(); n != 1 {
		t.Fatalf("engine asked %d times", n)
	}
	ids := &Request{Kind: KindCompletion, Model: "demo", Tokens: []uint32{5}, HasTokens: true}
	if got, _ := tok.Tokenize(ctx, ids); !reflect.DeepEqual(got, []uint32{5}) || asked.Load() != 1 {
		t.Fatalf("token ids: %v", got)
	}
	dead := NewEngine(&http.Client{}, func(string) []EngineTarget { return []EngineTarget{{URL: "http://127.0.0.1:1"}} }, 8)
	if _, err := dead.Tokenize(ctx, req); !errors.Is(err, errTokenize) {
		t.Fatalf("no engine: %v", err)
	}
}
