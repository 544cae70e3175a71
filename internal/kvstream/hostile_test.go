package kvstream

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"kvrouter/internal/zmtp"
)

// Hand-made ZMTP for playing strangers.

func zmtpGreeting() []byte {
	g := make([]byte, 64)
	g[0], g[9], g[10], g[11] = 0xFF, 0x7F, 3, 1
	copy(g[12:], "NULL")
	return g
}

func zmtpReady(socketType string) []byte {
	body := append([]byte{5}, "READY"...)
	body = append(body, 11)
	body = append(body, "Socket-Type"...)
	body = binary.BigEndian.AppendUint32(body, uint32(len(socketType)))
	body = append(body, socketType...)
	return append([]byte{0x04, byte(len(body))}, body...)
}

// longFrame announces n bytes in a long frame header.
func longFrame(n uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{0x02}, n)
}

// attack sends b to ep and waits for the connection to be closed on it.
func attack(t *testing.T, ep string, b []byte) {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(ep, "tcp://"), waitLimit)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(waitLimit))
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the connection was not closed")
	}
}

// The attacks of issue 28: 73 bytes (greeting and a frame header
// announcing 2^62 bytes) and a 64 GiB announcement after a handshake. Each
// port kvrouter's processes open must drop and count them, allocate nothing
// of what was announced, and keep serving.
func hostileBytes(peerType string) map[string][]byte {
	return map[string][]byte{
		"73 bytes":                    append(zmtpGreeting(), longFrame(1<<62)...),
		"64 GiB after the handshake":  bytes.Join([][]byte{zmtpGreeting(), zmtpReady(peerType), longFrame(64 << 30), make([]byte, 4096)}, nil),
		"2^62 after the handshake":    bytes.Join([][]byte{zmtpGreeting(), zmtpReady(peerType), longFrame(1 << 62)}, nil),
		"garbage instead of greeting": bytes.Repeat([]byte("GET / HTTP/1.1\r\n"), 8),
	}
}

func TestHostileBytes(t *testing.T) {
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	t.Run("bound subscriber", func(t *testing.T) {
		// serve --events-bind, and the agent's socket for an engine that dials.
		checkLeaks(t)
		ep := freeTCP(t)
		s, out := startSub(t, Config{Endpoint: ep, Bind: true, OnePublisher: true})
		waitFor(t, "the subscriber to bind", func() bool {
			c, err := net.Dial("tcp", strings.TrimPrefix(ep, "tcp://"))
			if err == nil {
				c.Close()
			}
			return err == nil
		})
		// That connection said nothing: a handshake failure too.
		waitFor(t, "the bind check counted", func() bool { return s.Stats().HandshakeFailures == 1 })
		for _, b := range hostileBytes("PUB") {
			attack(t, ep, b)
		}
		waitFor(t, "every attack counted", func() bool {
			st := s.Stats()
			return st.HandshakeFailures == 1+2 && st.Oversize == 2
		})
		p := startPub(t, PublisherConfig{Endpoint: ep, Backoff: fastBackoff})
		probe(t, pubSender(t, p, "kv"), out)
	})
	t.Run("bound publisher and replay", func(t *testing.T) {
		// The mocker's (and a simulated engine's) events and replay ports.
		checkLeaks(t)
		p := startPub(t, PublisherConfig{Endpoint: anyTCP, ReplayEndpoint: anyTCP})
		for _, b := range hostileBytes("SUB") {
			attack(t, tcpEndpoint(p.Addr()), b)
		}
		for _, b := range hostileBytes("DEALER") {
			attack(t, tcpEndpoint(p.ReplayAddr()), b)
		}
		waitFor(t, "every attack counted", func() bool {
			st := p.Stats()
			return st.HandshakeFailures == 2*2 && st.Oversize == 2*2
		})
		ep := tcpEndpoint(p.Addr())
		_, out := startSub(t, Config{Endpoint: ep, ReplayEndpoint: tcpEndpoint(p.ReplayAddr())})
		last, _ := probe(t, pubSender(t, p, "kv"), out)
		s0 := last + 100
		p.setSkip(func(seq uint64) bool { return seq == s0+1 })
		publishUpTo(t, p, s0)
		p.Publish("kv", []byte("a"))
		p.Publish("kv", []byte("b"))
		p.Publish("kv", []byte("c"))
		expectItems(t, out,
			fmt.Sprintf("msg %s %d", ep, s0),
			fmt.Sprintf("gap %s %d-%d", ep, s0+1, s0+1),
			fmt.Sprintf("msg %s %d r", ep, s0+1),
			fmt.Sprintf("healed %s %d-%d", ep, s0+1, s0+1),
			fmt.Sprintf("msg %s %d", ep, s0+2))
	})
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if d := after.TotalAlloc - before.TotalAlloc; d > 64<<20 {
		t.Fatalf("the attacks made the process allocate %d bytes", d)
	}
}

// TestMaxMessageSize: a batch over MaxMessageSize drops the connection
// before it is read; the subscriber counts it, redials and goes on.
func TestMaxMessageSize(t *testing.T) {
	checkLeaks(t)
	p := startPub(t, PublisherConfig{Endpoint: anyTCP})
	ep := tcpEndpoint(p.Addr())
	s, out := startSub(t, Config{Endpoint: ep, Backoff: fastBackoff, Limits: Limits{MaxMessageSize: 1024}})
	probe(t, pubSender(t, p, "kv"), out)
	p.Publish("kv", make([]byte, 1024))
	var before []string
	for {
		it := nextItem(t, out)
		if _, ok := it.(Reconnected); ok {
			break
		}
		before = append(before, itemString(it))
		if len(before) > 100 {
			t.Fatalf("no reconnect after the oversize batch; items %q", before)
		}
	}
	probe(t, pubSender(t, p, "kv"), out)
	if st := s.Stats(); st.Oversize != 1 || st.Reconnects != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestMalformedReplayRepliesCounted: each malformed replay reply is dropped
// and counted by what is wrong with it.
func TestMalformedReplayRepliesCounted(t *testing.T) {
	checkLeaks(t)
	router, err := zmtp.New(zmtp.Router, zmtp.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { router.Close() })
	if err := router.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	go func() {
		req, err := router.Recv(context.Background())
		if err != nil {
			return
		}
		id := req.Frames[0]
		seq := req.Frames[2]
		for _, frames := range [][][]byte{
			{[]byte("x"), []byte("kv"), seq, []byte("bad delimiter")},
			{{}, {1, 2}, []byte("bad seq")},
			{{}, seq},
			{{}, seq, []byte("p"), []byte("extra"), []byte("more")},
			{{}, seq, []byte("good")},
			{{}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, {}},
		} {
			router.Send(context.Background(), append([][]byte{id}, frames...))
		}
	}()
	p := startPub(t, PublisherConfig{Endpoint: anyTCP})
	ep := tcpEndpoint(p.Addr())
	s, out := startSub(t, Config{Endpoint: ep, ReplayEndpoint: "tcp://" + router.Addr().String()})
	last, _ := probe(t, pubSender(t, p, "kv"), out)
	s0 := last + 100
	p.setSkip(func(seq uint64) bool { return seq == s0+1 })
	publishUpTo(t, p, s0)
	p.Publish("kv", []byte("a"))
	p.Publish("kv", []byte("b"))
	p.Publish("kv", []byte("c"))
	expectItems(t, out,
		fmt.Sprintf("msg %s %d", ep, s0),
		fmt.Sprintf("gap %s %d-%d", ep, s0+1, s0+1),
		fmt.Sprintf("msg %s %d r", ep, s0+1),
		fmt.Sprintf("healed %s %d-%d", ep, s0+1, s0+1))
	st := s.Stats()
	if st.BadDelimiter != 1 || st.BadSeqLength != 1 || st.WrongFrameCount != 2 || st.Malformed != 4 {
		t.Fatalf("stats %+v", st)
	}
}

// TestHeartbeatNoticesSilentPublisher: with Heartbeat, a publisher that
// completed its handshake and then went silent without closing (a host
// gone) is dropped and redialed.
func TestHeartbeatNoticesSilentPublisher(t *testing.T) {
	checkLeaks(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	conns := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write(append(zmtpGreeting(), zmtpReady("PUB")...))
			conns <- c // and never read again
		}
	}()
	t.Cleanup(func() {
		l.Close()
		for len(conns) > 0 {
			(<-conns).Close()
		}
	})
	s, _ := startSub(t, Config{Endpoint: "tcp://" + l.Addr().String(), Backoff: fastBackoff, Limits: Limits{Heartbeat: 20 * time.Millisecond}})
	waitFor(t, "a heartbeat timeout and a redial", func() bool { return s.Stats().HeartbeatTimeouts >= 1 && len(conns) >= 2 })
}

// TestPublisherRedialsRestartedSubscriber: a dialing Publisher notices that
// its bind-mode subscriber went away and dials it again when it is back.
func TestPublisherRedialsRestartedSubscriber(t *testing.T) {
	checkLeaks(t)
	ep := freeTCP(t)
	p := startPub(t, PublisherConfig{Endpoint: ep, Backoff: fastBackoff})
	for round := range 2 {
		s, err := NewSubscriber(Config{Endpoint: ep, Bind: true, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		out := make(chan Item)
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx, out) }()
		probe(t, pubSender(t, p, "kv"), out)
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
}

// openFiles counts the process's open file descriptors (-1 where
// /proc/self/fd is not there).
func openFiles() int {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(fds)
}

// TestCloseLeavesNoGoroutines: publishers, subscribers and replays started
// and stopped leave no goroutine and no file descriptor behind
// (go-zeromq/zmq4 leaked a goroutine per PUB socket and parked readers of
// closed connections).
func TestCloseLeavesNoGoroutines(t *testing.T) {
	base, baseFiles := runtime.NumGoroutine(), openFiles()
	for range 5 {
		p, err := NewPublisher(PublisherConfig{Endpoint: anyTCP, ReplayEndpoint: anyTCP, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewSubscriber(Config{Endpoint: tcpEndpoint(p.Addr()), ReplayEndpoint: tcpEndpoint(p.ReplayAddr()), CatchUp: true, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		out := make(chan Item, 1024)
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx, out) }()
		probe(t, pubSender(t, p, "kv"), out)
		cancel()
		<-done
		p.Close()
	}
	waitFor(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= base })
	waitFor(t, "file descriptors to close", func() bool { return openFiles() <= baseFiles })
}
