package serve

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"kvrouter/internal/cluster/clustertest"
	"kvrouter/internal/cost"
	"kvrouter/internal/direct"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// loadResult is one request of a load run as its client saw it.
type loadResult struct {
	id         string
	stream     bool
	start, end time.Time
	status     int
	worker     string // x-kvrouter-worker
	events     int    // data events before the end
	errEvent   bool
	done       bool // the stream's [DONE], or a whole JSON answer
	err        error
}

// failed: the client did not get a whole answer.
func (r loadResult) failed() bool {
	return r.err != nil || r.status != http.StatusOK || r.errEvent || !r.done
}

// load keeps clients sending requests, streamed and not, one at a time
// each, until finish.
type load struct {
	mu      sync.Mutex
	results []loadResult
	stop    chan struct{}
	wg      sync.WaitGroup
}

func startLoad(url string, clients int, body func(client, n int, stream bool) string) *load {
	l := &load{stop: make(chan struct{})}
	hc := &http.Client{Timeout: 30 * time.Second}
	for c := range clients {
		l.wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-l.stop:
					return
				default:
				}
				stream := (c+n)%2 == 0
				r := send(hc, url, fmt.Sprintf("c%d-%d", c, n), stream, body(c, n, stream))
				l.mu.Lock()
				l.results = append(l.results, r)
				l.mu.Unlock()
			}
		})
	}
	return l
}

func (l *load) finish() []loadResult {
	close(l.stop)
	l.wg.Wait()
	return l.results
}

func send(hc *http.Client, url, id string, stream bool, body string) loadResult {
	r := loadResult{id: id, stream: stream, start: time.Now()}
	defer func() { r.end = time.Now() }()
	req, err := http.NewRequest(http.MethodPost, url+"/v1/completions", strings.NewReader(body))
	if err != nil {
		r.err = err
		return r
	}
	req.Header.Set(headerRequestID, id)
	resp, err := hc.Do(req)
	if err != nil {
		r.err = err
		return r
	}
	defer resp.Body.Close()
	r.status, r.worker = resp.StatusCode, resp.Header.Get(headerWorker)
	if !stream || resp.StatusCode != http.StatusOK {
		b, err := io.ReadAll(resp.Body)
		r.err = err
		r.done = err == nil && json.Valid(b) && bytes.Contains(b, []byte(`"choices"`))
		return r
	}
	br := bufio.NewReader(resp.Body)
	var data []byte
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			if err != io.EOF {
				r.err = err
			}
			return r
		}
		line = bytes.TrimRight(line, "\r\n")
		if v, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
			data = append(data, v...)
			continue
		}
		if len(line) > 0 || data == nil {
			continue
		}
		switch {
		case string(data) == "[DONE]":
			r.done = true
		case bytes.HasPrefix(data, []byte(`{"error"`)):
			r.errEvent = true
		default:
			r.events++
		}
		data = nil
	}
}

// deadWorker is the scenario both fleets go through: under load, one
// worker dies (kill); the router marks it down, and from then on no
// request is sent to it; the only client errors are of the streams that
// were running on it, each ended with an error event; its engine metrics
// are dropped; and once it serves again (restart) it is back.
type deadWorker struct {
	g      *Service
	logs   *logRecorder
	victim string // its worker id
	body   func(client, n int, stream bool) string
	kill   func()
	// restart brings it back; nil skips that part.
	restart func()
}

func (s *deadWorker) run(t *testing.T) {
	g := s.g
	view := func(id string) (workerHealth, bool) {
		var out struct {
			Workers []struct {
				ID     string       `json:"id"`
				Health workerHealth `json:"health"`
				Ranks  []struct {
					Engine *struct{} `json:"engine_metrics"`
				} `json:"ranks"`
			} `json:"workers"`
		}
		if err := json.Unmarshal(get(t, g.admin()+"/debug/workers"), &out); err != nil {
			t.Fatal(err)
		}
		for _, w := range out.Workers {
			if w.ID == id {
				return w.Health, w.Ranks[0].Engine != nil
			}
		}
		t.Fatalf("/debug/workers lacks %s", id)
		return workerHealth{}, false
	}
	eventually(t, "engine metrics of the victim", func() bool { _, m := view(s.victim); return m })

	l := startLoad(g.url(), 8, s.body)
	time.Sleep(300 * time.Millisecond)
	// Killed with requests running on it, when that happens soon.
	running := func() bool { return g.Router.Load().Of(cost.Rank{Worker: s.victim}).Requests >= 2 }
	for deadline := time.Now().Add(2 * time.Second); !running() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	killAt := time.Now()
	s.kill()
	eventually(t, "the victim to be marked down", func() bool { return g.Router.Down(s.victim) })
	h, metrics := view(s.victim)
	if h.State != "down" || h.Since == nil || h.Reason == "" {
		t.Fatalf("victim's health %+v", h)
	}
	downAt := *h.Since
	t.Logf("marked down %v after the kill: %s", downAt.Sub(killAt), h.Reason)
	if metrics {
		t.Error("the down victim keeps its engine metrics")
	}
	for i := range 20 {
		if r := g.route(t, s.body(100, i, false)); r.Target.WorkerID == s.victim {
			t.Fatalf("/debug/route chose the down victim")
		}
	}
	time.Sleep(500 * time.Millisecond)
	var upAt time.Time
	if s.restart != nil {
		s.restart()
		eventually(t, "the victim to come back", func() bool { return !g.Router.Down(s.victim) })
		h, _ := view(s.victim)
		upAt = *h.Since
		time.Sleep(500 * time.Millisecond)
	}
	results := l.finish()

	starts := map[string]time.Time{}
	var failed, afterDown, backOnVictim int
	for _, r := range results {
		starts[r.id] = r.start
		if r.start.After(downAt) && !r.failed() {
			afterDown++
		}
		if !upAt.IsZero() && r.start.After(upAt) && r.worker == s.victim && !r.failed() {
			backOnVictim++
		}
		if !r.failed() {
			continue
		}
		failed++
		// Only a stream already running on the victim may fail, and only
		// with an error event after the events it got.
		if r.worker != s.victim || !r.stream || !r.start.Before(killAt) || r.events == 0 || !r.errEvent || r.done || r.err != nil {
			t.Errorf("request %s failed: %+v", r.id, r)
		}
	}
	// Every attempt on a dead worker is refused or unanswered, and logged
	// (at debug level past the first) with the request.
	var retried int
	for _, rec := range append(s.logs.with("retrying on another"), s.logs.with("no other worker")...) {
		if rec.attrs["worker"] != s.victim {
			continue
		}
		retried++
		if start, ok := starts[rec.attrs["request"]]; !ok || start.After(downAt) {
			t.Errorf("request %s (started %v after it was marked down) was sent to the down victim",
				rec.attrs["request"], start.Sub(downAt))
		}
	}
	t.Logf("%d requests, %d failed (streams running on the victim), %d retried elsewhere, %d served after it was marked down, %d on the victim once back",
		len(results), failed, retried, afterDown, backOnVictim)
	if failed+retried == 0 {
		t.Error("the kill met no request running on the victim: the scenario tested nothing")
	}
	if afterDown == 0 {
		t.Error("no request was served after the victim was marked down")
	}
	if !upAt.IsZero() && backOnVictim == 0 {
		t.Error("no request went to the victim once it was back")
	}
}

// workerHealth is a /debug/workers worker's health.
type workerHealth struct {
	State  string     `json:"state"`
	Since  *time.Time `json:"since"`
	Reason string     `json:"reason"`
}

// TestDeadWorkerUnderLoad: the dead-worker scenario on in-process engines.
func TestDeadWorkerUnderLoad(t *testing.T) {
	h := newHarness(t)
	var engines []*engine
	var specs []direct.WorkerSpec
	for range 3 {
		e := newEngine(t, testModel)
		e.delay = 100 * time.Millisecond
		e.metrics = "vllm:num_requests_running 1\n"
		engines = append(engines, e)
		specs = append(specs, spec(t, e, ""))
	}
	logs := &logRecorder{}
	g := h.service(func(o *Options) {
		o.Workers = specs
		o.Now = time.Now // probes on the wall clock
		o.HealthInterval = 100 * time.Millisecond
		o.EngineMetricsInterval = 50 * time.Millisecond
		o.Log = slog.New(logs)
	})
	waitWorkers(t, g, 3)
	victim := engines[0]
	(&deadWorker{g: g, logs: logs, victim: victim.hostPort(), kill: victim.kill, restart: victim.restart,
		body: func(c, n int, stream bool) string {
			extra := ""
			if stream {
				extra = `,"stream":true`
			}
			return completionBody(prompt(uint32(1000*c+10*n), 3), extra)
		}}).run(t)
}

// mockerProc is a `kvrouter mocker` process on fixed ports, so that it can
// be killed and started again where it was.
type mockerProc struct {
	t                  *testing.T
	bin                string
	http, ctl, ev, rep int
	cmd                *exec.Cmd
	exited             chan struct{}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startMocker(t *testing.T, bin string) *mockerProc {
	m := &mockerProc{t: t, bin: bin, http: freePort(t), ctl: freePort(t), ev: freePort(t), rep: freePort(t)}
	m.start()
	t.Cleanup(func() {
		m.cmd.Process.Signal(os.Interrupt)
		select {
		case <-m.exited:
		case <-time.After(waitLimit):
			m.cmd.Process.Kill()
			<-m.exited
		}
	})
	return m
}

func (m *mockerProc) url() string { return "http://127.0.0.1:" + strconv.Itoa(m.http) }

func (m *mockerProc) start() {
	m.t.Helper()
	m.cmd = exec.Command(m.bin, "mocker", "--flavor", "vllm", "--block-size", "16",
		"--listen", "127.0.0.1:"+strconv.Itoa(m.http), "--control-port", strconv.Itoa(m.ctl),
		"--kv-events-endpoint", "tcp://*:"+strconv.Itoa(m.ev), "--kv-events-replay-endpoint", "tcp://*:"+strconv.Itoa(m.rep),
		"--log-level", "warn")
	m.cmd.Stderr = os.Stderr
	if err := m.cmd.Start(); err != nil {
		m.t.Fatal(err)
	}
	m.exited = make(chan struct{})
	go func() { m.cmd.Wait(); close(m.exited) }()
	eventually(m.t, "the mocker to serve", func() bool {
		resp, err := http.Get(m.url() + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// kill is kill -9.
func (m *mockerProc) kill() {
	m.cmd.Process.Signal(syscall.SIGKILL)
	<-m.exited
}

// TestDeadWorkerProcesses: the dead-worker scenario with `kvrouter
// mocker` processes, one of them killed with SIGKILL and started again.
func TestDeadWorkerProcesses(t *testing.T) {
	bin := clustertest.Binary(t)
	h := newHarness(t)
	var procs []*mockerProc
	var specs []direct.WorkerSpec
	for range 3 {
		m := startMocker(t, bin)
		procs = append(procs, m)
		s, err := direct.ParseWorkerSpec(fmt.Sprintf("url=%s,events=tcp://127.0.0.1:%d,block_size=16", m.url(), m.ev))
		if err != nil {
			t.Fatal(err)
		}
		specs = append(specs, s)
	}
	logs := &logRecorder{}
	g := h.service(func(o *Options) {
		o.Workers = specs
		o.Now = time.Now
		o.HealthInterval = 200 * time.Millisecond
		o.EngineMetricsInterval = 100 * time.Millisecond
		o.Log = slog.New(logs)
	})
	waitWorkers(t, g, 3)
	victim := procs[0]
	(&deadWorker{g: g, logs: logs, victim: specs[0].ID, kill: victim.kill, restart: victim.start,
		body: func(c, n int, stream bool) string {
			return fmt.Sprintf(`{"model":"kvrouter-demo","prompt":"client %d asks question %d about the weather in a town","max_tokens":20,"stream":%v}`,
				c, n, stream)
		}}).run(t)
}
