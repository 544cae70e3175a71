package zmtp

import (
	"runtime"
	"slices"
	"testing"
	"time"
)

// peerOf is the socket type a raw peer plays against each of ours.
var peerOf = map[Type]string{Pub: "SUB", Sub: "PUB", Router: "DEALER", Dealer: "ROUTER"}

// TestOversizeAnnouncementsDropped replays the attacks that killed every
// process using go-zeromq/zmq4 v0.17.0: a greeting followed by a frame
// header announcing 2^62 bytes (73 bytes in all: makeslice panic), or
// 64 GiB (out of memory). Against every socket type, before and after the
// handshake, the connection must be dropped and counted without
// allocating what was announced, and the socket must go on serving.
func TestOversizeAnnouncementsDropped(t *testing.T) {
	attacks := []struct {
		name      string
		handshake bool   // complete the handshake first
		bytes     []byte // then send these
		oversize  bool   // counted in Oversize
	}{
		{name: "73 bytes: greeting and a 2^62 frame", bytes: cat(greetingFor(1), longHeader(0, 1<<62))},
		{name: "greeting and a 2^62 command", bytes: cat(greetingFor(1), longHeader(flagCommand, 1<<62)), oversize: true},
		{name: "greeting and a 64 GiB command", bytes: cat(greetingFor(0), longHeader(flagCommand, 64<<30), []byte("READY")), oversize: true},
		{name: "2^62 frame after the handshake", handshake: true, bytes: longHeader(0, 1<<62), oversize: true},
		{name: "64 GiB frame after the handshake", handshake: true, bytes: cat(longHeader(0, 64<<30), make([]byte, 1000)), oversize: true},
		{name: "64 GiB last frame of a message", handshake: true, bytes: cat(frame(flagMore, "kv"), longHeader(0, 64<<30)), oversize: true},
	}
	for _, typ := range []Type{Pub, Sub, Router, Dealer} {
		t.Run(string(typ), func(t *testing.T) {
			checkLeaks(t)
			s := newSocket(t, typ, Options{})
			ep := listen(t, s)
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			for i, a := range attacks {
				p := dialRaw(t, ep)
				if a.handshake {
					p.handshake(peerOf[typ], 1)
				}
				p.write(a.bytes)
				p.expectClosed()
				st := s.Stats()
				wantOversize := 0
				for _, b := range attacks[:i+1] {
					if b.oversize {
						wantOversize++
					}
				}
				if st.Oversize != uint64(wantOversize) {
					t.Fatalf("%s: Oversize %d, want %d (%+v)", a.name, st.Oversize, wantOversize, st)
				}
			}
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			// Everything the test process allocated meanwhile, goroutine
			// stacks and buffers included: far below any announcement.
			if d := after.TotalAlloc - before.TotalAlloc; d > 16<<20 {
				t.Fatalf("the attacks made the process allocate %d bytes", d)
			}
			if d := time.Since(start); d > waitLimit {
				t.Fatalf("the attacks took %v", d)
			}
			st := s.Stats()
			if st.HandshakeFailures != 3 || st.Connections != 3 {
				t.Fatalf("stats %+v: want 3 handshake failures and 3 connections", st)
			}
			// The socket still serves a well-behaved peer.
			waitFor(t, "the attackers' connections to go", func() bool { return len(*s.peers.Load()) == 0 })
			p := handshakeRaw(t, ep, peerOf[typ], 1)
			switch typ {
			case Pub:
				p.write(appendCommand(nil, cmdSubscribe))
				waitFor(t, "the subscription", func() bool { return len(*s.peers.Load()) == 1 && (*s.peers.Load())[0].subs.match(nil) })
				send(t, s, "kv", "ok")
				p.expect("kv|ok")
			default:
				if typ == Sub {
					s.Subscribe("")
					p.expect("!SUBSCRIBE:")
				}
				p.write(frame(flagMore, "kv"), frame(0, "ok"))
				got := frameStrings(recv(t, s))
				if typ == Router {
					got = got[1:]
				}
				if !slices.Equal(got, []string{"kv", "ok"}) {
					t.Fatalf("after the attacks got %q", got)
				}
			}
		})
	}
}

// TestHandshakeDeadline: a peer that connects and stalls is dropped once
// HandshakeTimeout has passed, whatever it sent of its greeting.
func TestHandshakeDeadline(t *testing.T) {
	checkLeaks(t)
	const timeout = 100 * time.Millisecond
	s := newSocket(t, Sub, Options{HandshakeTimeout: timeout})
	ep := listen(t, s)
	for i, sent := range [][]byte{nil, greetingFor(1)[:10], greetingFor(1), cat(greetingFor(1), readyFor("PUB", "")[:3])} {
		start := time.Now()
		p := dialRaw(t, ep)
		p.write(sent)
		p.expectClosed()
		if d := time.Since(start); d < timeout {
			t.Fatalf("after %d bytes: closed after %v, before the deadline", len(sent), d)
		}
		if st := s.Stats(); st.HandshakeFailures != uint64(i+1) {
			t.Fatalf("after %d bytes: %+v", len(sent), st)
		}
	}
}

func TestHandshakeRefusals(t *testing.T) {
	tests := []struct {
		name  string
		self  Type
		bytes []byte
	}{
		{"ZMTP 2.0", Sub, greetingWith(func(g []byte) { g[10] = 2 })},
		{"HTTP", Sub, []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n" + string(make([]byte, 64)))},
		{"PLAIN", Sub, greetingWith(func(g []byte) { copy(g[12:], "PLAIN") })},
		{"message before READY", Sub, cat(greetingFor(1), frame(0, "kv"))},
		{"PING before READY", Sub, cat(greetingFor(1), appendCommand(nil, cmdPing, []byte{0, 0}))},
		{"ERROR", Sub, cat(greetingFor(1), appendCommand(nil, cmdError, []byte("\x03bad")))},
		{"no Socket-Type", Sub, cat(greetingFor(1), appendCommand(nil, cmdReady, appendProperty(nil, "Identity", nil)))},
		{"PUB to PUB", Pub, cat(greetingFor(1), readyFor("PUB", ""))},
		{"SUB to SUB", Sub, cat(greetingFor(1), readyFor("SUB", ""))},
		{"PUB to ROUTER", Router, cat(greetingFor(1), readyFor("PUB", ""))},
		{"zero-led identity", Router, cat(greetingFor(1), readyFor("DEALER", "\x00abc"))},
		{"truncated property", Sub, cat(greetingFor(1), appendCommand(nil, cmdReady, []byte{11, 'S', 'o'}))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkLeaks(t)
			s := newSocket(t, tc.self, Options{})
			p := dialRaw(t, listen(t, s))
			p.write(tc.bytes)
			p.expectClosed()
			if st := s.Stats(); st.HandshakeFailures != 1 || st.Connections != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// TestMaxPeers: connections past MaxPeers, handshaking ones included, are
// closed at once and counted; a freed slot serves again.
func TestMaxPeers(t *testing.T) {
	checkLeaks(t)
	s := newSocket(t, Sub, Options{MaxPeers: 2})
	s.Subscribe("")
	ep := listen(t, s)
	a := dialRaw(t, ep)
	b := handshakeRaw(t, ep, "PUB", 1)
	waitFor(t, "both connections", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.inbound == 2
	})
	c := dialRaw(t, ep)
	c.expectClosed()
	if st := s.Stats(); st.Refused != 1 {
		t.Fatalf("stats %+v, want one refused", st)
	}
	a.c.Close()
	waitFor(t, "the slot to free", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.inbound == 1
	})
	handshakeRaw(t, ep, "PUB", 1).expect("!SUBSCRIBE:")
	b.expect("!SUBSCRIBE:") // still served
}
