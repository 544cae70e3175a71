package serve

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"kvrouter/internal/direct"
	"kvrouter/internal/mocker"
)

// anyPort is a TCP port free on every interface right now.
func anyPort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startRole starts a simulated engine of a flavour and role on free
// loopback ports.
func startRole(t testing.TB, flavor, role string) *mocker.Engine {
	t.Helper()
	for try := 0; ; try++ {
		c := mocker.Config{Listen: "127.0.0.1:0", Flavor: mocker.Flavor(flavor), Role: role, BlockSize: 16, Speedup: 50,
			ControlPort: anyPort(t), EventsEndpoint: "tcp://*:" + strconv.Itoa(anyPort(t)),
			ReplayEndpoint: "tcp://*:" + strconv.Itoa(anyPort(t)), Logger: quiet()}
		if flavor == "sglang" && role == mocker.RolePrefill {
			c.BootstrapPort = anyPort(t)
		}
		e, err := mocker.Start(c)
		if err != nil && errors.Is(err, syscall.EADDRINUSE) && try < 5 {
			continue // a port probed free was taken meanwhile
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		return e
	}
}

// mockerSpec is the --worker of a simulated engine, its events included.
func mockerSpec(t testing.TB, e *mocker.Engine, flavor, role string) direct.WorkerSpec {
	t.Helper()
	s := fmt.Sprintf("url=%s,events=%s,replay=%s,block_size=16,engine=%s,type=%s", e.URL(), e.EventEndpoint(0), e.ReplayEndpoint(0), flavor, role)
	if a := e.BootstrapAddr(); a != nil {
		s += ",bootstrap_port=" + strconv.Itoa(a.(*net.TCPAddr).Port)
	}
	spec, err := direct.ParseWorkerSpec(s)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// deadSpec is a --worker whose engine refuses every connection.
func deadSpec(t testing.TB, flavor, role string) direct.WorkerSpec {
	t.Helper()
	s := fmt.Sprintf("url=http://127.0.0.1:%d,block_size=16,engine=%s,type=%s,model=%s", anyPort(t), flavor, role, mocker.DefaultModel)
	spec, err := direct.ParseWorkerSpec(s)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// pdAnswer is what a test reads of an answer through the router.
type pdAnswer struct {
	status   int
	worker   string
	text     string
	peer     int // usage.kvrouter.peer_restored_tokens
	done     bool
	errEvent bool
}

// ask sends a completion through the router, streamed or not.
func ask(t testing.TB, g *Service, prompt string, stream bool) pdAnswer {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": mocker.DefaultModel, "prompt": prompt, "max_tokens": 8, "stream": stream,
		"stream_options": map[string]bool{"include_usage": true},
		// What a client may not steer: the router drops it.
		"kv_transfer_params": map[string]any{"do_remote_prefill": true, "remote_host": "10.9.9.9", "remote_port": 1},
		"bootstrap_host":     "10.9.9.9", "bootstrap_port": 1, "bootstrap_room": 5})
	resp, err := http.Post(g.url()+"/v1/completions", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	a := pdAnswer{status: resp.StatusCode, worker: resp.Header.Get(headerWorker)}
	type usageJSON struct {
		KVRouter struct {
			Peer int `json:"peer_restored_tokens"`
		} `json:"kvrouter"`
	}
	var chunk struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
		Usage *usageJSON       `json:"usage"`
		Error *json.RawMessage `json:"error"`
	}
	if !stream {
		if err := json.NewDecoder(resp.Body).Decode(&chunk); err == nil {
			if len(chunk.Choices) > 0 {
				a.text = chunk.Choices[0].Text
			}
			if chunk.Usage != nil {
				a.peer = chunk.Usage.KVRouter.Peer
			}
			a.done = chunk.Error == nil
		}
		return a
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			a.done = true
			continue
		}
		chunk.Choices, chunk.Usage, chunk.Error = nil, nil, nil
		if json.Unmarshal([]byte(data), &chunk) != nil {
			continue
		}
		if chunk.Error != nil {
			a.errEvent = true
		}
		for _, c := range chunk.Choices {
			a.text += c.Text
		}
		if chunk.Usage != nil {
			a.peer = chunk.Usage.KVRouter.Peer
		}
	}
	return a
}

// reference is what one aggregated engine answers.
func reference(t testing.TB, ref *mocker.Engine, prompt string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 8})
	resp, err := http.Post(ref.URL()+"/v1/completions", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Choices) == 0 {
		t.Fatalf("reference answer: %v", err)
	}
	return out.Choices[0].Text
}

func longText(salt string, sentences int) string {
	var b strings.Builder
	for i := range sentences {
		fmt.Fprintf(&b, "%s sentence %d is about the cache of block %d and its router. ", salt, i, i*7%13)
	}
	return b.String()
}

type pdRoute struct {
	Target struct {
		WorkerID string `json:"worker_id"`
	} `json:"target"`
	Disaggregated *struct {
		Prefill *struct {
			Target struct {
				WorkerID string `json:"worker_id"`
			} `json:"target"`
		} `json:"prefill"`
		SkipPrefill bool   `json:"skip_prefill"`
		SkipReason  string `json:"skip_reason"`
		WouldSkip   string `json:"would_skip_reason"`
	} `json:"disaggregated"`
}

func explainPD(t testing.TB, g *Service, prompt string) pdRoute {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": mocker.DefaultModel, "prompt": prompt, "max_tokens": 8})
	status, _, out := post(t, g.admin(), "/debug/route", string(body))
	if status != http.StatusOK {
		t.Fatalf("/debug/route: %d %s", status, out)
	}
	var r pdRoute
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func metricLine(t testing.TB, g *Service, line string) bool {
	return strings.Contains(string(get(t, g.admin()+"/metrics")), line+"\n")
}

// TestPDServing: one prefill and two decode engines per flavour behind the
// router. Every answer is an aggregated engine's, from a decode worker
// that pulled the prompt's KV from the prefill's runner; a vLLM decode
// worker that holds all but a short rest of a follow-up runs it alone; an
// SGLang one cannot, and the prefill leg runs.
func TestPDServing(t *testing.T) {
	for _, flavor := range []string{"vllm", "sglang"} {
		t.Run(flavor, func(t *testing.T) {
			h := newHarness(t)
			p := startRole(t, flavor, mocker.RolePrefill)
			d1, d2 := startRole(t, flavor, mocker.RoleDecode), startRole(t, flavor, mocker.RoleDecode)
			ref := startRole(t, flavor, mocker.RoleAggregated)
			g := h.service(func(o *Options) {
				o.Workers = []direct.WorkerSpec{mockerSpec(t, p, flavor, "prefill"), mockerSpec(t, d1, flavor, "decode"), mockerSpec(t, d2, flavor, "decode")}
				o.PD.LocalPrefillTokens = 64
			})
			waitWorkers(t, g, 3)
			decoders := map[string]bool{d1.Addr().String(): true, d2.Addr().String(): true}
			first := longText(flavor+" first", 12)
			r := explainPD(t, g, first)
			if r.Disaggregated == nil || r.Disaggregated.Prefill == nil || r.Disaggregated.Prefill.Target.WorkerID != p.Addr().String() ||
				!decoders[r.Target.WorkerID] {
				t.Fatalf("/debug/route of a new prompt: %+v", r)
			}
			for i, stream := range []bool{false, true} {
				prompt := longText(fmt.Sprintf("%s %d", flavor, i), 12)
				a := ask(t, g, prompt, stream)
				if a.status != http.StatusOK || !a.done || a.text != reference(t, ref, prompt) || !decoders[a.worker] || a.peer == 0 {
					t.Fatalf("stream %v: %+v, want %q from a decode worker that pulled the prompt", stream, a, reference(t, ref, prompt))
				}
			}
			if !metricLine(t, g, `kvrouter_pd_legs_total{leg="prefill",outcome="ok"} 2`) || !metricLine(t, g, `kvrouter_pd_legs_total{leg="decode",outcome="ok"} 2`) {
				t.Fatalf("leg metrics:\n%s", get(t, g.admin()+"/metrics"))
			}

			// A follow-up: the decode worker that served the first turn
			// holds all but the new line.
			a := ask(t, g, first, false)
			if a.status != http.StatusOK || a.text != reference(t, ref, first) {
				t.Fatalf("first turn: %+v", a)
			}
			follow := first + "And one more."
			var fr pdRoute
			eventually(t, "the decode worker's blocks to be known", func() bool {
				fr = explainPD(t, g, follow)
				return fr.Disaggregated != nil && fr.Disaggregated.WouldSkip == "short_rest"
			})
			a = ask(t, g, follow, true)
			if a.status != http.StatusOK || !a.done || a.text != reference(t, ref, follow) {
				t.Fatalf("follow-up: %+v", a)
			}
			if flavor == "vllm" {
				if !fr.Disaggregated.SkipPrefill || fr.Disaggregated.Prefill != nil || !metricLine(t, g, `kvrouter_pd_prefill_skipped_total{reason="short_rest"} 1`) {
					t.Fatalf("vLLM follow-up not run alone: %+v", fr.Disaggregated)
				}
			} else if fr.Disaggregated.SkipPrefill || fr.Disaggregated.Prefill == nil || !metricLine(t, g, `kvrouter_pd_legs_total{leg="prefill",outcome="ok"} 4`) {
				t.Fatalf("SGLang follow-up skipped its prefill leg: %+v", fr.Disaggregated)
			}
		})
	}
}

// TestPDPrefillFails: a prefill leg whose worker refuses is tried on
// another prefill worker, then the request runs whole where it can: on the
// vLLM decode worker, on an SGLang aggregated worker; with neither, the
// client gets the failure.
func TestPDPrefillFails(t *testing.T) {
	tests := []struct {
		name      string
		flavor    string
		livePre   bool // a second, live prefill worker
		agg       bool // an aggregated worker
		status    int
		fallback  string
		fromRoles string // the answer's worker: "decode" or "aggregated"
	}{
		{name: "vllm: the decode worker runs it whole", flavor: "vllm", status: 200, fallback: "decode_whole", fromRoles: "decode"},
		{name: "vllm: another prefill worker", flavor: "vllm", livePre: true, status: 200, fallback: "prefill_retried", fromRoles: "decode"},
		{name: "sglang: another prefill worker", flavor: "sglang", livePre: true, status: 200, fallback: "prefill_retried", fromRoles: "decode"},
		{name: "sglang: an aggregated worker", flavor: "sglang", agg: true, status: 200, fallback: "aggregated", fromRoles: "aggregated"},
		{name: "sglang: none left", flavor: "sglang", status: 502, fallback: "none_left"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			dec := startRole(t, tc.flavor, mocker.RoleDecode)
			ref := startRole(t, tc.flavor, mocker.RoleAggregated)
			dead := deadSpec(t, tc.flavor, "prefill")
			specs := []direct.WorkerSpec{dead, mockerSpec(t, dec, tc.flavor, "decode")}
			if tc.livePre {
				specs = append(specs, mockerSpec(t, startRole(t, tc.flavor, mocker.RolePrefill), tc.flavor, "prefill"))
			}
			if tc.agg {
				specs = append(specs, mockerSpec(t, ref, tc.flavor, "aggregated"))
			}
			g := h.service(func(o *Options) { o.Workers, o.PD.LocalPrefillTokens = specs, 64 })
			waitWorkers(t, g, len(specs))
			// A prompt whose prefill leg goes to the dead worker first.
			var prompt string
			for i := 0; ; i++ {
				prompt = longText(fmt.Sprintf("%s %d", tc.name, i), 30)
				r := explainPD(t, g, prompt)
				if r.Disaggregated != nil && r.Disaggregated.Prefill != nil && r.Disaggregated.Prefill.Target.WorkerID == dead.ID {
					break
				}
				if i > 200 {
					t.Fatal("the dead prefill worker is never chosen")
				}
			}
			a := ask(t, g, prompt, true)
			if a.status != tc.status {
				t.Fatalf("status %d, want %d: %+v", a.status, tc.status, a)
			}
			if !metricLine(t, g, `kvrouter_pd_fallbacks_total{kind="`+tc.fallback+`"} 1`) ||
				!metricLine(t, g, `kvrouter_pd_legs_total{leg="prefill",outcome="failed"} 1`) {
				t.Fatalf("metrics:\n%s", get(t, g.admin()+"/metrics"))
			}
			if tc.status != http.StatusOK {
				return
			}
			want := map[string]string{"decode": dec.Addr().String(), "aggregated": ref.Addr().String()}[tc.fromRoles]
			if !a.done || a.text != reference(t, ref, prompt) || a.worker != want {
				t.Fatalf("answer %+v, want %q from %s", a, reference(t, ref, prompt), want)
			}
		})
	}
}

// TestPDDecodeBreaks: a decode leg whose stream breaks off ends the
// client's stream with an error event and no [DONE], never passed off as
// a whole answer.
func TestPDDecodeBreaks(t *testing.T) {
	pre := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model"}]}`, mocker.DefaultModel)
			return
		}
		if r.URL.Path != "/v1/completions" {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"choices":[{"text":"x"}],"kv_transfer_params":{"do_remote_prefill":true,"remote_host":"127.0.0.1","remote_port":1,"remote_block_ids":[]}}`)
	}))
	defer pre.Close()
	got := make(chan string, 1)
	dec := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model"}]}`, mocker.DefaultModel)
			return
		}
		if r.URL.Path != "/v1/completions" {
			return // /health, probed once the stream broke
		}
		var b struct {
			KV json.RawMessage `json:"kv_transfer_params"`
		}
		json.NewDecoder(r.Body).Decode(&b)
		select {
		case got <- string(b.KV):
		default:
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"text\":\"a\"}]}\n\n")
		w.(http.Flusher).Flush()
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close()
	}))
	defer dec.Close()
	h := newHarness(t)
	spec := func(url, role string) direct.WorkerSpec {
		s, err := direct.ParseWorkerSpec("url=" + url + ",block_size=16,engine=vllm,type=" + role)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	g := h.service(func(o *Options) {
		o.Workers, o.PD.LocalPrefillTokens = []direct.WorkerSpec{spec(pre.URL, "prefill"), spec(dec.URL, "decode")}, 64
	})
	waitWorkers(t, g, 2)
	a := ask(t, g, longText("breaks", 30), true)
	if a.status != http.StatusOK || a.done || !a.errEvent || a.text != "a" {
		t.Fatalf("broken decode stream: %+v", a)
	}
	if kv := <-got; !strings.Contains(kv, `"remote_port":1`) || strings.Contains(kv, "10.9.9.9") {
		t.Fatalf("the decode leg's kv_transfer_params %s: want the prefill's answer, not the client's", kv)
	}
	if !metricLine(t, g, `kvrouter_pd_legs_total{leg="decode",outcome="failed"} 1`) || !metricLine(t, g, `kvrouter_stream_errors_total 1`) {
		t.Fatalf("metrics:\n%s", get(t, g.admin()+"/metrics"))
	}
}
