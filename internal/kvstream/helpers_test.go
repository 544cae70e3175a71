package kvstream

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"kvrouter/internal/zmtp/zmtptest"
)

// waitLimit is a safety net against hangs, not a timing assertion.
const waitLimit = 10 * time.Second

// leakIgnored are goroutines of the go-zeromq/zmq4 peers of the interop
// tests that cannot be stopped: zmq4 v0.17.0 never ends a PUB socket's send
// loop. Our own sockets leave nothing behind.
var leakIgnored = []string{"zmq4.(*pubMWriter).run"}

// checkLeaks fails t if goroutines started during the test outlive it.
func checkLeaks(t *testing.T) {
	t.Helper()
	zmtptest.CheckLeaks(t, leakIgnored...)
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// freeTCP returns a loopback endpoint whose port was free a moment ago,
// for sockets that must be bound by a peer we do not construct first.
func freeTCP(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "tcp://" + addr
}

// anyTCP makes a Publisher bind (Binds wants a wildcard) on a free port.
const anyTCP = "tcp://*:0"

// tcpEndpoint is the loopback endpoint dialing a socket bound on anyTCP.
func tcpEndpoint(a net.Addr) string {
	return "tcp://127.0.0.1:" + strconv.Itoa(a.(*net.TCPAddr).Port)
}

// bindTCP is the wildcard endpoint a Publisher binds for a dialable one.
func bindTCP(ep string) string {
	return "tcp://*:" + ep[strings.LastIndexByte(ep, ':')+1:]
}

// startSub runs a Subscriber until the test ends and returns its stream.
func startSub(t testing.TB, cfg Config) (*Subscriber, <-chan Item) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	s, err := NewSubscriber(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan Item)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, out) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return s, out
}

func startPub(t testing.TB, cfg PublisherConfig) *Publisher {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	p, err := NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func (p *Publisher) setSkip(f func(seq uint64) bool) {
	p.mu.Lock()
	p.skip = f
	p.mu.Unlock()
}

func nextItem(t testing.TB, out <-chan Item) Item {
	t.Helper()
	select {
	case it := <-out:
		return it
	case <-time.After(waitLimit):
		t.Fatal("no item arrived")
		return nil
	}
}

var probePayload = []byte("probe")

// nextMessage returns the next Message that is not a probe, failing on
// any other item.
func nextMessage(t testing.TB, out <-chan Item) Message {
	t.Helper()
	for {
		it := nextItem(t, out)
		if isProbe(it) {
			continue
		}
		m, ok := it.(Message)
		if !ok {
			t.Fatalf("unexpected %s", itemString(it))
		}
		return m
	}
}

func isProbe(it Item) bool {
	m, ok := it.(Message)
	return ok && bytes.Equal(m.Payload, probePayload)
}

// probe defeats ZMQ's slow joiner: it sends probes until one is delivered
// and returns that probe's seq and the other items seen before it.
func probe(t testing.TB, send func(payload []byte) uint64, out <-chan Item) (seq uint64, before []string) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(waitLimit)
	send(probePayload)
	for {
		select {
		case it := <-out:
			if isProbe(it) {
				return it.(Message).Seq, before
			}
			before = append(before, itemString(it))
		case <-tick.C:
			send(probePayload)
		case <-deadline:
			t.Fatal("no probe was delivered")
		}
	}
}

func pubSender(t testing.TB, p *Publisher, topic string) func([]byte) uint64 {
	return func(payload []byte) uint64 {
		seq, err := p.Publish(topic, payload)
		if err != nil {
			t.Error(err)
		}
		return seq
	}
}

// expectItems reads items, skipping late probes, and compares them with want.
func expectItems(t *testing.T, out <-chan Item, want ...string) {
	t.Helper()
	var got []string
	for len(got) < len(want) {
		it := nextItem(t, out)
		if isProbe(it) {
			continue
		}
		got = append(got, itemString(it))
		if got[len(got)-1] != want[len(got)-1] {
			break
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("items:\n got %q\nwant %q", got, want)
	}
}

// waitFor polls cond; the limit is a safety net, not an assertion.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(waitLimit); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
