package kvstream

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// cutProxy forwards TCP connections to a target and can cut them all and
// refuse new ones for a while: a network outage between a subscriber and a
// publisher that both outlive it.
type cutProxy struct {
	ln     net.Listener
	target string // host:port
	wg     sync.WaitGroup

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]bool
}

// startProxy forwards a loopback port to target (tcp://HOST:PORT) until the
// test ends.
func startProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: strings.TrimPrefix(target, "tcp://"), conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.cut(true)
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) endpoint() string { return tcpEndpoint(p.ln.Addr()) }

func (p *cutProxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			in.Close()
			continue
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns[in], p.conns[out] = true, true
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(out, in)
		go p.pipe(in, out)
	}
}

// pipe copies until either side ends, then closes both.
func (p *cutProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	io.Copy(dst, src)
	dst.Close()
	src.Close()
}

// cut closes every connection; down refuses new ones until cut(false).
func (p *cutProxy) cut(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// At a reconnect the subscriber catches up at once on the publisher's
// whole history, what it sent while the connection was down included: an
// idle publisher sends no live message whose seq would reveal the gap,
// and the consumer starts over at a Reconnected. In connect mode the subscriber dials the
// publisher; in bind mode with OnePublisher the publisher dials it.
func TestReconnectCatchUp(t *testing.T) {
	for _, mode := range []string{"connect", "bind"} {
		t.Run(mode, func(t *testing.T) {
			checkLeaks(t)
			var (
				p   *Publisher
				px  *cutProxy
				ep  string
				out <-chan Item
			)
			if mode == "connect" {
				p = startPub(t, PublisherConfig{Endpoint: anyTCP, ReplayEndpoint: anyTCP})
				px = startProxy(t, tcpEndpoint(p.Addr()))
				ep = px.endpoint()
				_, out = startSub(t, Config{Endpoint: ep, ReplayEndpoint: tcpEndpoint(p.ReplayAddr()), CatchUp: true, Backoff: fastBackoff})
			} else {
				replay := freeTCP(t)
				ep = freeTCP(t)
				_, out = startSub(t, Config{Endpoint: ep, Bind: true, OnePublisher: true, ReplayEndpoint: replay, CatchUp: true})
				px = startProxy(t, ep)
				p = startPub(t, PublisherConfig{Endpoint: px.endpoint(), ReplayEndpoint: bindTCP(replay), Backoff: fastBackoff})
			}
			// The first batch arrives live or through the catch-up at start,
			// whichever wins.
			if _, err := p.Publish("kv", []byte("a")); err != nil {
				t.Fatal(err)
			}
			if m := nextMessage(t, out); m.Seq != 0 {
				t.Fatalf("first batch: seq %d", m.Seq)
			}

			px.cut(true)
			for _, b := range []string{"b", "c"} {
				if _, err := p.Publish("kv", []byte(b)); err != nil {
					t.Fatal(err)
				}
			}
			px.cut(false)
			// The publisher stays idle: only the catch-up brings them.
			expectItems(t, out, "reconnected "+ep, fmt.Sprintf("msg %s 0 r", ep), fmt.Sprintf("msg %s 1 r", ep), fmt.Sprintf("msg %s 2 r", ep))

			// Live batches go on from there (the publisher may drop the
			// first ones until the new connection's subscription reaches it;
			// their gaps heal).
			_, before := probe(t, pubSender(t, p, "kv"), out)
			for _, it := range before {
				if !strings.HasPrefix(it, "gap ") {
					t.Fatalf("before the first live batch: %q", before)
				}
			}
		})
	}
}

// Follow with a hook runs it before the first run and again when the
// publisher comes back, then runs the subscriber anew: its catch-up
// replays the publisher's history from seq 0 after the hook.
func TestFollowRunsAnewWhenPublisherComesBack(t *testing.T) {
	checkLeaks(t)
	ep, replay := freeTCP(t), freeTCP(t)
	start := func() *Publisher {
		return startPub(t, PublisherConfig{Endpoint: bindTCP(ep), ReplayEndpoint: bindTCP(replay)})
	}
	p1 := start()
	if _, err := p1.Publish("kv", []byte("a")); err != nil {
		t.Fatal(err)
	}
	sub, err := NewSubscriber(Config{Endpoint: ep, ReplayEndpoint: replay, CatchUp: true, Backoff: fastBackoff, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 64)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Follow(ctx, sub, func(context.Context) { got <- "before" }, func(it Item) { got <- itemString(it) })
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Follow: %v", err)
		}
	}()
	expect := func(want ...string) {
		t.Helper()
		for _, w := range want {
			select {
			case g := <-got:
				// A batch may come live or replayed, whichever wins.
				if g != w && g+" r" != w {
					t.Fatalf("got %q, want %q", g, w)
				}
			case <-time.After(waitLimit):
				t.Fatalf("no %q", w)
			}
		}
	}
	expect("before", fmt.Sprintf("msg %s 0 r", ep))
	p1.Close()
	p2 := start()
	if _, err := p2.Publish("kv", []byte("x")); err != nil {
		t.Fatal(err)
	}
	// The new process's history, from seq 0: no Restart, since the run is
	// new.
	expect("reconnected "+ep, "before", fmt.Sprintf("msg %s 0 r", ep))
}
