package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"kvrouter/internal/hints"
	"kvrouter/internal/router"
	"kvrouter/internal/schedule"
	"kvrouter/internal/tokenizer"
)

func TestParseWorkerSpec(t *testing.T) {
	sg := hints.PlaceSGLangOld
	tests := []struct {
		in   string
		err  string
		want WorkerSpec
	}{
		{in: "url=http://10.0.0.5:8000", want: WorkerSpec{ID: "10.0.0.5:8000", URL: "http://10.0.0.5:8000", BlockSize: 16, DP: 1, TP: 1, Engine: "vllm"}},
		{in: "url=http://h:1/,events=tcp://h:5557,replay=tcp://h:5558,block_size=64,dp=2,tp=4,type=decode,id=w1,model=m,engine=sglang,hint=sglang-old",
			want: WorkerSpec{ID: "w1", URL: "http://h:1", Events: "tcp://h:5557", Replay: "tcp://h:5558", BlockSize: 64, DP: 2, TP: 4,
				Type: hints.TypeDecode, Model: "m", Engine: "sglang", Placement: &sg}},
		{in: "events=tcp://h:1", err: "url: want http://HOST:PORT"},
		{in: "url=ftp://h:1", err: "url: want"},
		{in: "url=http://h:1,events=tcp://*:5557", err: "events=tcp://*:5557: the engine binds there"},
		{in: "url=http://h:1,replay=tcp://h:2", err: "replay needs events"},
		{in: "url=http://h:1,dp=0", err: "dp: \"0\": want a positive integer"},
		{in: "url=http://h:1,engine=sglang,tp=0", err: "tp: \"0\": want a positive integer"},
		{in: "url=http://h:1,tp=2", err: "tp=2: engine=vllm reports one runner inventory"},
		{in: "url=http://h:1,block_size=x", err: "block_size"},
		{in: "url=http://h:1,type=both", err: "type"},
		{in: "url=http://h:1,engine=tgi", err: "engine"},
		{in: "url=http://h:1,hint=kvcr", err: "hint"},
		{in: "url=http://h:1,color=red", err: "unknown key"},
		{in: "url=http://h:1,url=http://h:2", err: "url given twice"},
		{in: "url", err: "want key=value"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseWorkerSpec(tc.in)
			if tc.err != "" {
				if !errors.Is(err, ErrWorkerFlag) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v (%v)\nwant %+v", got, err, tc.want)
			}
		})
	}
	s, _ := ParseWorkerSpec("url=https://example.com")
	if s.HostPort() != "example.com:443" {
		t.Fatalf("host:port %q", s.HostPort())
	}
	w := s.Worker("m", true)
	if w.Mode != router.ModeEvents || w.Owners[0] != FlagOwner("example.com", 0) || w.Capability.CanConsume {
		t.Fatalf("worker %+v", w)
	}
	if w := s.Worker("m", false); w.Mode != router.ModeApproximate || w.Owners != nil {
		t.Fatalf("approximate worker %+v", w)
	}
}

// TestParseEngineMetrics reads testdata/enginemetrics/NAME.prom and
// compares with NAME.json.
func TestParseEngineMetrics(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "enginemetrics", "*.prom"))
	if len(files) == 0 {
		t.Fatal("no cases")
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".prom")
		t.Run(name, func(t *testing.T) {
			text, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(strings.TrimSuffix(f, ".prom") + ".json")
			if err != nil {
				t.Fatal(err)
			}
			var tc struct {
				Worker router.Worker
				Want   map[string]router.EngineLoad
			}
			if err := json.Unmarshal(raw, &tc); err != nil {
				t.Fatal(err)
			}
			want := map[int]router.EngineLoad{}
			for k, v := range tc.Want {
				r, _ := strconv.Atoi(k)
				want[r] = v
			}
			if got := ParseEngineMetrics(text, tc.Worker); !reflect.DeepEqual(got, want) {
				t.Fatalf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestPeerBook(t *testing.T) {
	load := schedule.NewLoad()
	b := newPeerBook(load, 10*time.Second)
	t0 := time.Unix(0, 0)
	r := schedule.Rank{Worker: "w", DP: 1}
	steps := []struct {
		msg  loadMsg
		at   time.Duration
		want schedule.RankLoad
	}{
		{loadMsg{Replica: "p", Op: opStart, ID: "p/1", Worker: "w", Rank: 1, Prefill: 100, Blocks: 4}, 0, schedule.RankLoad{PrefillTokens: 100, DecodeBlocks: 4, Requests: 1}},
		{loadMsg{Replica: "p", Op: opStart, ID: "p/1", Worker: "w", Rank: 1, Prefill: 100, Blocks: 4}, 0, schedule.RankLoad{PrefillTokens: 100, DecodeBlocks: 4, Requests: 1}},
		{loadMsg{Replica: "p", Op: opStart, ID: "p/2", Worker: "w", Rank: 1, Prefill: 50, Blocks: 2}, 0, schedule.RankLoad{PrefillTokens: 150, DecodeBlocks: 6, Requests: 2}},
		{loadMsg{Replica: "p", Op: opFirst, ID: "p/1"}, time.Second, schedule.RankLoad{PrefillTokens: 50, DecodeBlocks: 6, Requests: 2}},
		{loadMsg{Replica: "p", Op: opFinish, ID: "p/1"}, time.Second, schedule.RankLoad{PrefillTokens: 50, DecodeBlocks: 2, Requests: 1}},
		{loadMsg{Replica: "q", Op: opStart, ID: "q/1", Worker: "w", Rank: 1, Prefill: 10, Blocks: 1}, 5 * time.Second, schedule.RankLoad{PrefillTokens: 60, DecodeBlocks: 3, Requests: 2}},
		// p's heartbeat no longer lists p/2: its finish was lost.
		{loadMsg{Replica: "p", Op: opAlive, IDs: nil}, 6 * time.Second, schedule.RankLoad{PrefillTokens: 10, DecodeBlocks: 1, Requests: 1}},
	}
	for i, s := range steps {
		b.apply(s.msg, t0.Add(s.at))
		if got := load.Of(r); got != s.want {
			t.Fatalf("step %d: %+v, want %+v", i, got, s.want)
		}
	}
	if gone := b.expire(t0.Add(14 * time.Second)); len(gone) != 0 {
		t.Fatalf("expired early: %v", gone)
	}
	if gone := b.expire(t0.Add(15 * time.Second)); !reflect.DeepEqual(gone, []string{"q"}) || load.Of(r) != (schedule.RankLoad{}) {
		t.Fatalf("expire: %v, load %+v", gone, load.Of(r))
	}
}

func TestRelaySSE(t *testing.T) {
	long := strings.Repeat("x", 100<<10)
	tests := []struct {
		name, in, want string
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
		{name: "no final blank line", in: "data: z", want: "data: z", firsts: 1},
		{name: "no data at all", in: ": ping\n\n", want: ": ping\n\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			firsts := 0
			var cached []int
			err := relaySSE(w, strings.NewReader(tc.in), tc.drop, func() { firsts++ }, func(u *usage) {
				n := -1
				if u.Details != nil {
					n = u.Details.CachedTokens
				}
				cached = append(cached, n)
			})
			if err != nil || w.Body.String() != tc.want || firsts != tc.firsts || !reflect.DeepEqual(cached, tc.usage) {
				t.Fatalf("err %v firsts %d usage %v\n got %.200q\nwant %.200q", err, firsts, cached, w.Body.String(), tc.want)
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
	e := newEngine(t, testModel)
	tok := NewEngine(NewClient(), func(string) []string { return []string{"http://127.0.0.1:1", e.url()} }, 8)
	ctx := context.Background()
	req := &Request{Kind: KindCompletion, Model: testModel, Prompt: "ab"}
	for range 3 {
		got, err := tok.Tokenize(ctx, req)
		if err != nil || !reflect.DeepEqual(got, []uint32{1000 + 'a', 1000 + 'b'}) {
			t.Fatalf("%v %v", got, err)
		}
	}
	if n := e.tokenize.Load(); n != 1 {
		t.Fatalf("engine asked %d times", n)
	}
	ids := &Request{Kind: KindCompletion, Model: testModel, Tokens: []uint32{5}, HasTokens: true}
	if got, _ := tok.Tokenize(ctx, ids); !reflect.DeepEqual(got, []uint32{5}) || e.tokenize.Load() != 1 {
		t.Fatalf("token ids: %v", got)
	}
	dead := NewEngine(NewClient(), func(string) []string { return []string{"http://127.0.0.1:1"} }, 8)
	if _, err := dead.Tokenize(ctx, req); !errors.Is(err, ErrTokenize) {
		t.Fatalf("no engine: %v", err)
	}
}

func TestLoadTemplate(t *testing.T) {
	dir := t.TempDir()
	goTmpl := filepath.Join(dir, "t.tmpl")
	os.WriteFile(goTmpl, []byte(`{{range .Messages}}[{{.Role}}]{{.Content}}{{end}}`), 0o644)
	cfg := filepath.Join(dir, "tokenizer_config.json")
	os.WriteFile(cfg, []byte(`{"chat_template":"{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"}`), 0o644)
	msgs := []tokenizer.Message{{Role: "user", Content: "hi"}}
	tests := []struct {
		name, cfg, want, err string
	}{
		{name: "plain", want: "user: hi\n"},
		{name: goTmpl, want: "[user]hi"},
		{name: "chatml", cfg: cfg, want: "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"},
		{name: "nope", err: "--chat-template"},
	}
	for _, tc := range tests {
		tmpl, err := LoadTemplate(tc.name, tc.cfg)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("%s: err %v", tc.name, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got, err := tmpl.Render(msgs, false)
		if err != nil || !strings.Contains(got, tc.want) {
			t.Fatalf("%s: %q %v, want %q", tc.name, got, err, tc.want)
		}
	}
}
