package zmtp

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var fastReconnect = func(int) time.Duration { return 5 * time.Millisecond }

// subscribed waits until pub has n peers, each subscribed to topic.
func subscribed(t *testing.T, pub *Socket, n int, topic string) {
	t.Helper()
	waitFor(t, "subscriptions", func() bool {
		ps := *pub.peers.Load()
		if len(ps) != n {
			return false
		}
		for _, p := range ps {
			if !p.subs.match([]byte(topic)) {
				return false
			}
		}
		return true
	})
}

func TestPubSubTransports(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		bind string // the endpoint to bind; "" for a loopback TCP port
		// subBinds: the SUB binds and the PUB connects (the llm-d way).
		subBinds bool
	}{
		{name: "tcp"},
		{name: "tcp, SUB binds", subBinds: true},
		{name: "ipc", bind: "ipc://" + filepath.Join(dir, "a.sock")},
		{name: "ipc, SUB binds", bind: "ipc://" + filepath.Join(dir, "b.sock"), subBinds: true},
		{name: "inproc", bind: "inproc://zmtp-test-a"},
		{name: "inproc, SUB binds", bind: "inproc://zmtp-test-b", subBinds: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkLeaks(t)
			pub := newSocket(t, Pub, Options{ReconnectDelay: fastReconnect})
			sub := newSocket(t, Sub, Options{ReconnectDelay: fastReconnect})
			if err := sub.Subscribe("kv"); err != nil {
				t.Fatal(err)
			}
			binder, connector := pub, sub
			if tc.subBinds {
				binder, connector = sub, pub
			}
			ep := tc.bind
			if ep == "" {
				ep = listen(t, binder)
			} else if err := binder.Listen(ep); err != nil {
				t.Fatal(err)
			}
			if err := connector.Connect(ep); err != nil {
				t.Fatal(err)
			}
			subscribed(t, pub, 1, "kv")
			send(t, pub, "zz", "filtered")
			for i := range 20 {
				send(t, pub, "kv@a", fmt.Sprint(i), strings.Repeat("x", i*100))
			}
			for i := range 20 {
				got := frameStrings(recv(t, sub))
				if want := []string{"kv@a", fmt.Sprint(i), strings.Repeat("x", i*100)}; !slices.Equal(got, want) {
					t.Fatalf("message %d: got %q", i, got)
				}
			}
		})
	}
}

// TestSubscriptionForms: a PUB takes subscriptions in both forms and
// filters by prefix for each peer; a SUB sends the form its peer's version
// knows.
func TestSubscriptionForms(t *testing.T) {
	checkLeaks(t)
	pub := newSocket(t, Pub, Options{})
	ep := listen(t, pub)
	v30 := handshakeRaw(t, ep, "SUB", 0)
	v31 := handshakeRaw(t, ep, "XSUB", 1)
	v30.write(frame(0, "\x01kv@a"))
	v31.write(appendCommand(nil, cmdSubscribe, []byte("kv@b")))
	waitFor(t, "subscriptions", func() bool {
		ps := *pub.peers.Load()
		// The peers attach in whichever order their handshakes end.
		return len(ps) == 2 && (ps[0].subs.match([]byte("kv@a")) && ps[1].subs.match([]byte("kv@b")) ||
			ps[1].subs.match([]byte("kv@a")) && ps[0].subs.match([]byte("kv@b")))
	})
	send(t, pub, "kv@a1", "x")
	send(t, pub, "kv@b1", "y")
	send(t, pub, "kv@c1", "z")
	send(t, pub, "kv@a2", "x")
	v30.expect("kv@a1|x")
	v30.expect("kv@a2|x")
	v31.expect("kv@b1|y")
	// Cancel, each in its form; a marker subscription shows it was read.
	v30.write(frame(0, "\x00kv@a"), frame(0, "\x01mark"))
	v31.write(appendCommand(nil, cmdCancel, []byte("kv@b")), appendCommand(nil, cmdSubscribe, []byte("mark")))
	waitFor(t, "cancels", func() bool {
		ps := *pub.peers.Load()
		return ps[0].subs.match([]byte("mark")) && ps[1].subs.match([]byte("mark"))
	})
	send(t, pub, "kv@a3", "x")
	send(t, pub, "kv@b3", "y")
	send(t, pub, "mark", "m")
	v30.expect("mark|m")
	v31.expect("mark|m")

	sub := newSocket(t, Sub, Options{})
	sub.Subscribe("kv")
	for _, minor := range []byte{0, 1} {
		rep, accept := rawListener(t)
		if err := sub.Connect(rep); err != nil {
			t.Fatal(err)
		}
		p := accept()
		p.handshake("PUB", minor)
		if minor == 0 {
			p.expect("\x01kv")
		} else {
			p.expect("!SUBSCRIBE:kv")
		}
		// A later subscription goes to the live peer.
		sub.Subscribe("more")
		if minor == 0 {
			p.expect("\x01more")
		} else {
			p.expect("!SUBSCRIBE:more")
		}
		// The SUB filters too: a PUB may send what was not asked for.
		p.write(frame(flagMore, "zz"), frame(0, "no"), frame(flagMore, fmt.Sprint("kv", minor)), frame(0, "yes"))
		if got := frameStrings(recv(t, sub)); !slices.Equal(got, []string{fmt.Sprint("kv", minor), "yes"}) {
			t.Fatalf("3.%d: got %q", minor, got)
		}
		sub.Unsubscribe("more")
		if minor == 0 {
			p.expect("\x00more")
		} else {
			p.expect("!CANCEL:more")
		}
	}
}

func TestSubscriptionLimit(t *testing.T) {
	checkLeaks(t)
	pub := newSocket(t, Pub, Options{MaxSubscriptions: 3})
	p := handshakeRaw(t, listen(t, pub), "SUB", 1)
	for i := range 3 {
		p.write(appendCommand(nil, cmdSubscribe, []byte(fmt.Sprint(i))))
	}
	p.write(appendCommand(nil, cmdSubscribe, []byte("0"))) // a repeat is no new prefix
	p.write(frame(0, "\x01four"))
	p.expectClosed()
	if st := pub.Stats(); st.Oversize != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestPingPong(t *testing.T) {
	checkLeaks(t)
	for _, typ := range []Type{Pub, Sub, Router, Dealer} {
		s := newSocket(t, typ, Options{})
		p := handshakeRaw(t, listen(t, s), peerOf[typ], 1)
		p.write(appendCommand(nil, cmdPing, []byte{0, 10}, []byte("ctx")))
		p.expect("!PONG:ctx")
		p.write(appendCommand(nil, cmdPing, []byte{0, 10}))
		p.expect("!PONG:")
		p.write(appendCommand(nil, "X-FUTURE", []byte("ignored")), appendCommand(nil, cmdPing, []byte{0, 0}, []byte("2")))
		p.expect("!PONG:2")
		// A PING without TTL, or with a context past 16 bytes, is malformed.
		p.write(appendCommand(nil, cmdPing, []byte{0}))
		p.expectClosed()
		p = handshakeRaw(t, listen(t, s), peerOf[typ], 1)
		p.write(appendCommand(nil, cmdPing, []byte{0, 0}, make([]byte, 17)))
		p.expectClosed()
		if st := s.Stats(); st.ProtocolErrors != 2 {
			t.Fatalf("%s: stats %+v", typ, st)
		}
	}
}

func TestHeartbeat(t *testing.T) {
	checkLeaks(t)
	const ivl = 20 * time.Millisecond
	// A 3.1 peer that never answers is dropped after HeartbeatTimeout.
	sub := newSocket(t, Sub, Options{Heartbeat: ivl, HeartbeatTimeout: 5 * ivl, Events: true, ReconnectDelay: func(int) time.Duration { return time.Hour }})
	ep, accept := rawListener(t)
	sub.Connect(ep)
	p := accept()
	p.handshake("PUB", 1)
	got, err := p.next()
	if err != nil || !strings.HasPrefix(got, "!PING:") {
		t.Fatalf("raw peer read %q, %v; want a PING", got, err)
	}
	p.expectClosed()
	if m := recv(t, sub); m.Event != EventConnected {
		t.Fatalf("got %+v", m)
	}
	if m := recv(t, sub); m.Event != EventDisconnected || !errors.Is(m.Err, errHeartbeat) {
		t.Fatalf("got %+v, want a heartbeat disconnect", m)
	}
	if st := sub.Stats(); st.HeartbeatTimeouts != 1 {
		t.Fatalf("stats %+v", st)
	}

	// Our PUB answers: an idle connection outlives many timeouts.
	pub := newSocket(t, Pub, Options{})
	sub2 := newSocket(t, Sub, Options{Heartbeat: ivl, HeartbeatTimeout: 3 * ivl})
	sub2.Subscribe("")
	sub2.Connect(listen(t, pub))
	subscribed(t, pub, 1, "")
	time.Sleep(20 * ivl)
	if st := sub2.Stats(); st.HeartbeatTimeouts != 0 || st.Connections != 1 {
		t.Fatalf("stats %+v", st)
	}
	send(t, pub, "still", "here")
	recv(t, sub2)
}

// TestSlowSubscriber: a subscriber that stops reading costs the publisher
// neither blocking nor unbounded memory: its messages are dropped past
// SendHWM, and once its socket accepts nothing for WriteTimeout it is
// dropped. Other subscribers are served meanwhile.
func TestSlowSubscriber(t *testing.T) {
	checkLeaks(t)
	pub := newSocket(t, Pub, Options{SendHWM: 10, WriteTimeout: 200 * time.Millisecond})
	ep := listen(t, pub)
	stuck := handshakeRaw(t, ep, "SUB", 1)
	stuck.write(appendCommand(nil, cmdSubscribe))
	fast := newSocket(t, Sub, Options{})
	fast.Subscribe("")
	fast.Connect(ep)
	subscribed(t, pub, 2, "")
	payload := make([]byte, 64<<10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-done:
				return
			default:
			}
			for range 50 {
				pub.Send(context.Background(), [][]byte{[]byte("kv"), payload})
			}
			time.Sleep(time.Millisecond)
			if pub.Stats().Stalled == 1 {
				return
			}
		}
	}()
	// Drain the fast one while the stuck one stalls.
	go func() {
		for {
			select {
			case <-fast.C():
			case <-done:
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(waitLimit):
		t.Fatal("the stuck subscriber was never dropped")
	}
	st := pub.Stats()
	if st.SendDropped == 0 || st.Stalled != 1 {
		t.Fatalf("stats %+v", st)
	}
	waitFor(t, "the stuck peer to go", func() bool { return len(*pub.peers.Load()) == 1 })
}

func TestRouterDealer(t *testing.T) {
	checkLeaks(t)
	r := newSocket(t, Router, Options{})
	ep := listen(t, r)
	named := newSocket(t, Dealer, Options{Identity: []byte("me")})
	anon := newSocket(t, Dealer, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	for _, d := range []*Socket{named, anon} {
		if err := d.Dial(ctx, ep); err != nil {
			t.Fatal(err)
		}
	}
	send(t, named, "", "from named")
	m := recv(t, r)
	if got := frameStrings(m); !slices.Equal(got, []string{"me", "", "from named"}) {
		t.Fatalf("got %q", got)
	}
	send(t, anon, "", "from anon")
	m = recv(t, r)
	if len(m.Frames[0]) != 5 || m.Frames[0][0] != 0 {
		t.Fatalf("generated identity %x, want 5 bytes led by 0", m.Frames[0])
	}
	send(t, r, string(m.Frames[0]), "", "to anon")
	send(t, r, "me", "", "to named")
	if got := frameStrings(recv(t, anon)); !slices.Equal(got, []string{"", "to anon"}) {
		t.Fatalf("anon got %q", got)
	}
	if got := frameStrings(recv(t, named)); !slices.Equal(got, []string{"", "to named"}) {
		t.Fatalf("named got %q", got)
	}
	if err := r.Send(ctx, [][]byte{[]byte("nobody"), {}}); !errors.Is(err, ErrNoPeer) {
		t.Fatalf("send to an unknown identity: %v", err)
	}
	// A second peer claiming a connected identity is refused: its side of
	// the handshake completes, then the ROUTER hangs up.
	dup := newSocket(t, Dealer, Options{Identity: []byte("me"), Events: true})
	if err := dup.Dial(ctx, ep); err != nil {
		t.Fatal(err)
	}
	recv(t, dup) // connected
	if m := recv(t, dup); m.Event != EventDisconnected {
		t.Fatalf("duplicate identity: got %+v, want a disconnect", m)
	}
	if st := r.Stats(); st.HandshakeFailures != 1 {
		t.Fatalf("stats %+v", st)
	}
	send(t, r, "me", "", "still the first")
	if got := frameStrings(recv(t, named)); !slices.Equal(got, []string{"", "still the first"}) {
		t.Fatalf("named got %q", got)
	}
}

// TestDealerWaitsForPeer: a DEALER's Send waits for a connection until its
// context ends.
func TestDealerWaitsForPeer(t *testing.T) {
	checkLeaks(t)
	ep, accept := rawListener(t)
	d := newSocket(t, Dealer, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := d.Send(ctx, [][]byte{[]byte("x")}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send without a peer: %v", err)
	}
	d.Connect(ep)
	sent := make(chan error, 1)
	go func() { sent <- d.Send(context.Background(), [][]byte{{}, []byte("hi")}) }()
	p := accept()
	p.handshake("ROUTER", 1)
	p.expect("|hi")
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
}

// TestReconnect: a connecting socket redials after a failed attempt and
// after a lost connection, and tells its connections apart.
func TestReconnect(t *testing.T) {
	checkLeaks(t)
	sub := newSocket(t, Sub, Options{Events: true, ReconnectDelay: fastReconnect})
	sub.Subscribe("")
	target := freePort(t)
	if err := sub.Connect(target); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "failed dials", func() bool { return sub.Stats().DialFailures >= 2 })
	var serials []uint64
	for round := range 2 {
		pub := newSocket(t, Pub, Options{})
		if err := pub.Listen(target); err != nil {
			t.Fatal(err)
		}
		m := recv(t, sub)
		if m.Event != EventConnected {
			t.Fatalf("round %d: got %+v, want EventConnected", round, m)
		}
		serials = append(serials, m.Peer)
		subscribed(t, pub, 1, "")
		send(t, pub, "kv", fmt.Sprint(round))
		m = recv(t, sub)
		if got := frameStrings(m); !slices.Equal(got, []string{"kv", fmt.Sprint(round)}) || m.Peer != serials[round] {
			t.Fatalf("round %d: got %q from %d", round, got, m.Peer)
		}
		pub.Close()
		if m := recv(t, sub); m.Event != EventDisconnected || m.Peer != serials[round] {
			t.Fatalf("round %d: got %+v, want EventDisconnected", round, m)
		}
	}
	if serials[0] == serials[1] {
		t.Fatalf("two connections numbered %d", serials[0])
	}
}

// freePort is a loopback endpoint whose port was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	s := newSocket(t, Pub, Options{})
	ep := listen(t, s)
	s.Close()
	return ep
}

func TestDial(t *testing.T) {
	checkLeaks(t)
	d := newSocket(t, Dealer, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := d.Dial(ctx, freePort(t)); err == nil {
		t.Fatal("Dial to nothing succeeded")
	}
	if st := d.Stats(); st.DialFailures != 1 {
		t.Fatalf("stats %+v", st)
	}
	// A peer that accepts and says nothing: ctx ends the handshake, not
	// HandshakeTimeout.
	ep, accept := rawListener(t)
	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	go accept()
	start := time.Now()
	if err := d.Dial(short, ep); err == nil {
		t.Fatal("Dial to a silent peer succeeded")
	}
	if el := time.Since(start); el > DefaultHandshakeTimeout/2 {
		t.Fatalf("Dial took %v", el)
	}
	for _, bad := range []string{"tcp://*:5", "tcp://h", "udp://h:1", "ipc://", "inproc://", "tcp://h:0"} {
		if err := d.Dial(ctx, bad); !errors.Is(err, ErrEndpoint) {
			t.Errorf("Dial %q: %v, want ErrEndpoint", bad, err)
		}
	}
}

// TestCloseStopsEverything closes sockets in every busy state: dialing in
// backoff, handshaking, blocked on a full receive queue, blocked in Send.
func TestCloseStopsEverything(t *testing.T) {
	checkLeaks(t)
	// Connect loops in backoff.
	sub := newSocket(t, Sub, Options{ReconnectDelay: func(int) time.Duration { return time.Hour }})
	sub.Connect(freePort(t))
	waitFor(t, "a failed dial", func() bool { return sub.Stats().DialFailures == 1 })
	// A handshaking stranger and a consumer that does not read.
	pub := newSocket(t, Pub, Options{})
	ep := listen(t, pub)
	dialRaw(t, ep)
	full := newSocket(t, Sub, Options{RecvHWM: 1})
	full.Subscribe("")
	full.Connect(ep)
	subscribed(t, pub, 1, "")
	for range 100 {
		send(t, pub, "kv", "x")
	}
	// A DEALER waiting for a peer, and a ROUTER whose peer stopped reading.
	d := newSocket(t, Dealer, Options{})
	blocked := make(chan error, 1)
	go func() { blocked <- d.Send(context.Background(), [][]byte{[]byte("x")}) }()
	r := newSocket(t, Router, Options{SendHWM: 1})
	p := handshakeRaw(t, listen(t, r), "DEALER", 1)
	p.write(frame(0, "hello"))
	m := recv(t, r)
	go func() {
		for {
			if r.Send(context.Background(), [][]byte{m.Frames[0], make([]byte, 1<<20)}) != nil {
				return
			}
		}
	}()
	time.Sleep(50 * time.Millisecond)
	for _, s := range []*Socket{sub, pub, full, d, r} {
		done := make(chan struct{})
		go func() { s.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(waitLimit):
			t.Fatalf("Close of a %s hangs", s.Type())
		}
	}
	if err := <-blocked; !errors.Is(err, ErrClosed) {
		t.Fatalf("blocked Send: %v, want ErrClosed", err)
	}
	if _, err := pub.Recv(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Recv after Close: %v", err)
	}
	if err := pub.Listen("tcp://127.0.0.1:0"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Listen after Close: %v", err)
	}
}

// TestManySubscriptionsReachNewPeer: our own subscriptions are never
// dropped, however many, unlike PONGs to a peer that floods PINGs.
func TestManySubscriptionsReachNewPeer(t *testing.T) {
	checkLeaks(t)
	sub := newSocket(t, Sub, Options{})
	const n = 3 * maxCtrl
	for i := range n {
		sub.Subscribe(fmt.Sprint("t", i))
	}
	ep, accept := rawListener(t)
	sub.Connect(ep)
	p := accept()
	p.handshake("PUB", 1)
	for i := range n {
		p.expect(fmt.Sprint("!SUBSCRIBE:t", i))
	}
}
