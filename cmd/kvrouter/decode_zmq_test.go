package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"kvrouter/internal/kvstream"
	"kvrouter/internal/zmtp"
)

// v1 is the vector V1 of docs/wire.md §3.10.
const v1 = "93cb41d954fc40200000928ba474797065ab426c6f636b53746f726564ac626c6f636b5f68617368657391cf84b146b151d55111b1706172656e745f626c6f636b5f68617368c0a9746f6b656e5f6964739401020304aa626c6f636b5f73697a6504a76c6f72615f6964c0a66d656469756da3475055a96c6f72615f6e616d65c0aa65787472615f6b65797391c0a967726f75705f69647800b26b765f63616368655f737065635f6b696e64ae66756c6c5f617474656e74696f6e84a474797065ac426c6f636b52656d6f766564ac626c6f636b5f68617368657391cf84b146b151d55111a66d656469756da3475055a967726f75705f6964780000"

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestDecodeZMQTail(t *testing.T) {
	port := strconv.Itoa(freePort(t))
	pub, err := kvstream.NewPublisher(kvstream.PublisherConfig{Endpoint: "tcp://*:" + port})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	payload, _ := hex.DecodeString(v1)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := newRootCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{"decode", "--zmq", "tcp://127.0.0.1:" + port, "--count", "2", "--topic", "kv"})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	// ZMQ drops what is published before the subscription is connected,
	// so keep publishing until the command has seen its two batches.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("decode --zmq: %v (stderr %s)", err, errOut.String())
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(lines) != 2 {
				t.Fatalf("want 2 lines, got %q", out.String())
			}
			for _, l := range lines {
				var v struct {
					Topic  string           `json:"topic"`
					Events []map[string]any `json:"events"`
				}
				if err := json.Unmarshal([]byte(l), &v); err != nil || v.Topic != "kv-events" || len(v.Events) != 2 {
					t.Fatalf("line %q: %+v %v", l, v, err)
				}
			}
			return
		case <-tick.C:
			if _, err := pub.Publish("kv-events", payload); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("decode --zmq did not finish")
		}
	}
}

// TestMain lets a test run this binary as kvrouter: with
// KVROUTER_TEST_ARGS set (the arguments as a JSON array) it runs the
// command instead of the tests.
func TestMain(m *testing.M) {
	if args := os.Getenv("KVROUTER_TEST_ARGS"); args != "" {
		var a []string
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			panic(err)
		}
		os.Args = append([]string{"kvrouter"}, a...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// lockedBuffer is an output several goroutines read and write.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// jsonLines parses s as decode's output: one batch a line.
func jsonLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for l := range strings.SplitSeq(strings.TrimSpace(s), "\n") {
		if l == "" {
			continue
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		out = append(out, v)
	}
	return out
}

// TestDecodeZMQBindReplay: with --bind, --replay names the one engine
// that connects, and its gaps are healed from there.
func TestDecodeZMQBindReplay(t *testing.T) {
	payload, _ := hex.DecodeString(v1)
	const topic = "kv@10.0.0.7:8000@m"
	var mu sync.Mutex
	lost := uint64(0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	router, err := zmtp.New(zmtp.Router, zmtp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer router.Close()
	if err := router.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			req, err := router.Recv(ctx)
			if err != nil {
				return
			}
			mu.Lock()
			seq := lost
			mu.Unlock()
			router.Send(ctx, append([][]byte{req.Frames[0]}, kvstream.EncodeReplayReply(seq, payload)...))
			router.Send(ctx, append([][]byte{req.Frames[0]}, kvstream.EncodeReplayEnd()...))
		}
	}()
	bind := "tcp://127.0.0.1:" + strconv.Itoa(freePort(t))
	cmd := newRootCmd()
	var out, errOut lockedBuffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{"decode", "--zmq", bind, "--bind", "--replay", "tcp://" + router.Addr().String()})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(runCtx) }()

	pub, err := zmtp.New(zmtp.Pub, zmtp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if err := pub.Connect(bind); err != nil {
		t.Fatal(err)
	}
	seq := uint64(0)
	for len(jsonLines(t, out.String())) == 0 {
		if ctx.Err() != nil {
			t.Fatalf("no batch decoded; stderr %s", errOut.String())
		}
		seq++
		pub.Send(ctx, kvstream.EncodeMessage(topic, seq, payload))
		time.Sleep(10 * time.Millisecond)
	}
	n := len(jsonLines(t, out.String()))
	mu.Lock()
	lost = seq + 1
	mu.Unlock()
	pub.Send(ctx, kvstream.EncodeMessage(topic, seq+2, payload))
	for len(jsonLines(t, out.String())) < n+2 && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("decode: %v (stderr %s)", err, errOut.String())
	}
	lines := jsonLines(t, out.String())
	if len(lines) < n+2 {
		t.Fatalf("%d lines, want %d; stderr %s", len(lines), n+2, errOut.String())
	}
	got := []any{lines[n]["seq"], lines[n+1]["seq"]}
	if got[0] != float64(seq+1) || got[1] != float64(seq+2) {
		t.Fatalf("seqs after the gap %v, want %d (replayed) and %d; stderr %s", got, seq+1, seq+2, errOut.String())
	}
}

// TestDecodeZMQSignal: decode --zmq writes each batch out as it arrives,
// and SIGINT or SIGTERM ends it with status 0 and nothing lost.
func TestDecodeZMQSignal(t *testing.T) {
	payload, _ := hex.DecodeString(v1)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			port := strconv.Itoa(freePort(t))
			pub, err := kvstream.NewPublisher(kvstream.PublisherConfig{Endpoint: "tcp://*:" + port, ReplayEndpoint: ""})
			if err != nil {
				t.Fatal(err)
			}
			defer pub.Close()
			path := filepath.Join(t.TempDir(), "out.jsonl")
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			self, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			proc := exec.Command(self)
			args, _ := json.Marshal([]string{"decode", "--zmq", "tcp://127.0.0.1:" + port})
			proc.Env = append(os.Environ(), "KVROUTER_TEST_ARGS="+string(args))
			proc.Stdout = f
			var stderr lockedBuffer
			proc.Stderr = &stderr
			if err := proc.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- proc.Wait() }()
			defer func() {
				if proc.ProcessState == nil {
					proc.Process.Kill()
					<-exited
				}
			}()
			read := func() []map[string]any {
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				return jsonLines(t, string(b))
			}
			// Each batch shows in the file while the command runs.
			deadline := time.Now().Add(20 * time.Second)
			for len(read()) < 5 {
				if time.Now().After(deadline) {
					t.Fatalf("%d lines in the file while decode runs; stderr %s", len(read()), stderr.String())
				}
				pub.Publish("kv", payload)
				time.Sleep(20 * time.Millisecond)
			}
			// Batches sent before the subscription was connected are
			// not delivered (ZMQ's slow joiner): wait for the last one.
			sent := pub.Stats().Published
			lastSeq := func() any { l := read(); return l[len(l)-1]["seq"] }
			for lastSeq() != float64(sent-1) && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if err := proc.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-exited:
				if err != nil {
					t.Fatalf("decode after %v: %v; stderr %s", sig, err, stderr.String())
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("decode did not stop on %v", sig)
			}
			lines := read()
			last := lines[len(lines)-1]["seq"]
			if last != float64(sent-1) {
				t.Fatalf("last seq written %v, want %d", last, sent-1)
			}
		})
	}
}
