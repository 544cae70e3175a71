package kvstream

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Interop with libzmq itself, through pyzmq: testdata/pyzmq_engine.py
// publishes and answers replay as vLLM's publisher does, subscribes, and
// asks for replay.

// pythonZMQ finds a Python that imports zmq ($KVROUTER_PYTHON, python3,
// then Debian's /usr/bin/python3), or skips the test.
func pythonZMQ(t *testing.T) string {
	t.Helper()
	for _, py := range []string{os.Getenv("KVROUTER_PYTHON"), "python3", "/usr/bin/python3"} {
		if py != "" && exec.Command(py, "-c", "import zmq").Run() == nil {
			return py
		}
	}
	t.Skip(`libzmq interop skipped: python3 -c "import zmq" fails; install pyzmq on libzmq (Debian: apt-get install -y python3-zmq) or point KVROUTER_PYTHON at a Python that has it`)
	return ""
}

// pyPeer is a running pyzmq_engine.py.
type pyPeer struct {
	t      *testing.T
	stdin  io.WriteCloser
	lines  chan string
	stderr *lockedBuffer
}

// lockedBuffer collects the script's stderr while the test may read it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func startPy(t *testing.T, args ...string) *pyPeer {
	t.Helper()
	py := pythonZMQ(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	cmd := exec.CommandContext(ctx, py, append([]string{"testdata/pyzmq_engine.py"}, args...)...)
	cmd.WaitDelay = time.Second
	p := &pyPeer{t: t, lines: make(chan string, 1024), stderr: new(lockedBuffer)}
	cmd.Stderr = p.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.stdin = stdin
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		io.WriteString(stdin, "quit\n")
		stdin.Close()
		<-scanned
		err := cmd.Wait()
		cancel()
		if err != nil && !t.Failed() {
			t.Errorf("pyzmq_engine.py %s: %v\n%s", args[0], err, p.stderr)
		}
	})
	if got := p.line(); got != "ready" {
		t.Fatalf("pyzmq_engine.py said %q, want ready\n%s", got, p.stderr)
	}
	return p
}

// line is the script's next line of output.
func (p *pyPeer) line() string {
	p.t.Helper()
	select {
	case l := <-p.lines:
		return l
	case <-time.After(waitLimit):
		p.t.Fatalf("pyzmq_engine.py said nothing\n%s", p.stderr)
		return ""
	}
}

// do sends a pub or hide command and returns the seq the script stamped.
func (p *pyPeer) do(verb, topic, payload string) uint64 {
	p.t.Helper()
	if _, err := fmt.Fprintf(p.stdin, "%s %s %s\n", verb, topic, payload); err != nil {
		p.t.Fatal(err)
	}
	seq, err := strconv.ParseUint(p.line(), 10, 64)
	if err != nil {
		p.t.Fatal(err)
	}
	return seq
}

// TestLibzmqPublisher subscribes to a libzmq publisher that binds (our SUB
// dials) or connects (our SUB binds, as the agent does), and heals a gap
// through its replay ROUTER.
func TestLibzmqPublisher(t *testing.T) {
	for _, pyBinds := range []bool{true, false} {
		t.Run(fmt.Sprintf("publisher binds %v", pyBinds), func(t *testing.T) {
			checkLeaks(t)
			ep, replay := freeTCP(t), freeTCP(t)
			args := []string{"publish", ep, "--replay", bindTCP(replay), "--first", "1000"}
			cfg := Config{Endpoint: ep, ReplayEndpoint: replay, Backoff: fastBackoff, Topic: "kv"}
			if pyBinds {
				args[1] = bindTCP(ep)
				args = append(args, "--bind")
				// Dialing first: the subscriber redials until it binds.
			} else {
				cfg.Bind, cfg.OnePublisher = true, true
			}
			var s *Subscriber
			var out <-chan Item
			if !pyBinds {
				s, out = startSub(t, cfg)
			}
			py := startPy(t, args...)
			if pyBinds {
				s, out = startSub(t, cfg)
			}
			probe(t, func(payload []byte) uint64 { return py.do("pub", "kv", string(payload)) }, out)
			a := py.do("pub", "kv", "m0")
			h := py.do("hide", "kv", "m1")
			b := py.do("pub", "kv", "m2")
			expectItems(t, out,
				fmt.Sprintf("msg %s %d", ep, a),
				fmt.Sprintf("gap %s %d-%d", ep, h, h),
				fmt.Sprintf("msg %s %d r", ep, h),
				fmt.Sprintf("healed %s %d-%d", ep, h, h),
				fmt.Sprintf("msg %s %d", ep, b))
			if st := s.Stats(); st.Replays != 1 || st.ReplayFailures != 0 || st.Malformed != 0 || st.HandshakeFailures != 0 || st.ProtocolErrors != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// TestLibzmqSubscriber publishes to a libzmq SUB that connects to our
// bound PUB, or binds while our PUB dials.
func TestLibzmqSubscriber(t *testing.T) {
	for _, pyBinds := range []bool{false, true} {
		t.Run(fmt.Sprintf("subscriber binds %v", pyBinds), func(t *testing.T) {
			checkLeaks(t)
			var p *Publisher
			var py *pyPeer
			if pyBinds {
				ep := freeTCP(t)
				py = startPy(t, "subscribe", bindTCP(ep), "--bind", "--topic", "kv@")
				p = startPub(t, PublisherConfig{Endpoint: ep, Backoff: fastBackoff})
			} else {
				p = startPub(t, PublisherConfig{Endpoint: anyTCP})
				py = startPy(t, "subscribe", tcpEndpoint(p.Addr()), "--topic", "kv@")
			}
			// The slow joiner: publish until a batch gets through.
			var got string
			for deadline := time.Now().Add(waitLimit); got == ""; {
				if time.Now().After(deadline) {
					t.Fatalf("the libzmq subscriber received nothing\n%s", py.stderr)
				}
				p.Publish("zz", []byte("filtered"))
				p.Publish("kv@a", []byte("first"))
				select {
				case got = <-py.lines:
				case <-time.After(20 * time.Millisecond):
				}
			}
			fields := strings.Fields(got)
			if len(fields) != 3 || fields[0] != "kv@a" || fields[2] != "first" {
				t.Fatalf("libzmq subscriber got %q", got)
			}
			seq, _ := p.Publish("kv@a", []byte("last"))
			// Earlier probes may still arrive first.
			for want := fmt.Sprintf("kv@a %d last", seq); got != want; {
				if got = py.line(); got != want && !strings.HasSuffix(got, " first") {
					t.Fatalf("libzmq subscriber got %q, want %q", got, want)
				}
			}
		})
	}
}

// TestLibzmqReplayClient asks our replay ROUTER from a libzmq DEALER.
func TestLibzmqReplayClient(t *testing.T) {
	checkLeaks(t)
	p := startPub(t, PublisherConfig{Endpoint: anyTCP, ReplayEndpoint: anyTCP, BufferSteps: 3, FirstSeq: 5})
	for i := 5; i <= 9; i++ {
		p.Publish("kv", []byte(fmt.Sprint("p", i)))
	}
	py := startPy(t, "request", tcpEndpoint(p.ReplayAddr()), "--start", "6")
	var got []string
	for l := py.line(); l != "end"; l = py.line() {
		got = append(got, l)
	}
	if want := []string{"7 p7", "8 p8", "9 p9"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("libzmq replay client got %q, want %q", got, want)
	}
	if st := p.Stats(); st.ReplayRequests != 1 || st.ReplayMalformed != 0 {
		t.Fatalf("stats %+v", st)
	}
}
