package mocker

import (
	"bytes"
	"kvrouter/internal/cluster/clustertest"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"kvrouter/internal/kvhash"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// proc is a `kvrouter mocker` process.
type proc struct {
	url, control string
}

func startProc(t *testing.T, bin string, seed int) proc {
	t.Helper()
	base := freePorts(t, 4)
	httpPort, control, events := base, base+1, base+2
	cmd := exec.Command(bin, "mocker",
		"--flavor", "sglang", "--block-size", "64", "--speedup", "100",
		"--listen", "127.0.0.1:"+strconv.Itoa(httpPort),
		"--control-port", strconv.Itoa(control),
		"--kv-events-endpoint", "tcp://*:"+strconv.Itoa(events),
		"--kv-events-replay-endpoint", "tcp://*:"+strconv.Itoa(events+1),
		"--model-seed", strconv.Itoa(seed), "--log-level", "warn")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		if err := <-exited; err != nil {
			t.Errorf("mocker process: %v\n%s", err, stderr.String())
		}
	})
	p := proc{url: "http://127.0.0.1:" + strconv.Itoa(httpPort), control: "tcp://127.0.0.1:" + strconv.Itoa(control)}
	ctx := testCtx(t)
	for {
		resp, err := http.Get(p.url + pathHealth)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("mocker exited: %v\n%s", err, stderr.String())
		case <-ctx.Done():
			t.Fatalf("mocker never became healthy\n%s", stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestProcesses runs the acceptance path across two OS processes built from
// cmd/kvrouter: every byte crosses real sockets between real processes.
func TestProcesses(t *testing.T) {
	bin := clustertest.Binary(t)
	a, b := startProc(t, bin, 0), startProc(t, bin, 0)
	ref := startEngine(t, nil) // only for its tokenizer
	prompt := longPrompt(t, ref, "processes", 2000)

	var tk tokenizeResponse
	if code := post(t, a.url+pathTokenize, map[string]any{"prompt": prompt}, &tk); code != http.StatusOK {
		t.Fatalf("tokenize: %d", code)
	}
	hint := envelopeFor(a.control, kvhash.SGLangPageHashes(tk.Tokens, 64, ""))
	var onA, onB, after completion
	post(t, a.url+pathCompletions, peerBody(prompt, nil), &onA)
	post(t, b.url+pathCompletions, peerBody(prompt, hint), &onB)
	if onB.Usage.KVRouter.PeerRestoredTokens < 1984 || onB.text() != onA.text() || onA.text() == "" {
		t.Fatalf("B restored %d tokens; %q vs %q", onB.Usage.KVRouter.PeerRestoredTokens, onB.text(), onA.text())
	}
	if code := post(t, a.url+pathAdminEvict, map[string]any{"tier": "all", "prompt": prompt}, nil); code != http.StatusOK {
		t.Fatalf("evict: %d", code)
	}
	c := startProc(t, bin, 0)
	post(t, c.url+pathCompletions, peerBody(prompt, hint), &after)
	if after.Usage.KVRouter.PeerRestoredTokens != 0 || after.text() != onA.text() {
		t.Fatalf("after eviction: restored %d, %q vs %q", after.Usage.KVRouter.PeerRestoredTokens, after.text(), onA.text())
	}
}
