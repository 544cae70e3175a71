package runner

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestAdmission(t *testing.T) {
	type step struct {
		op     string // "admit" or "release"
		client string
		want   refusal
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"per-client limit first", []step{
			{"admit", "a", refuseNone}, {"admit", "a", refuseNone}, {"admit", "a", refuseClient},
			{"admit", "b", refuseNone},
		}},
		{"full", []step{
			{"admit", "a", refuseNone}, {"admit", "b", refuseNone}, {"admit", "c", refuseNone},
			{"admit", "d", refuseFull},
			{"release", "b", 0}, {"admit", "d", refuseNone},
		}},
		{"client over its share even when full", []step{
			{"admit", "a", refuseNone}, {"admit", "a", refuseNone}, {"admit", "b", refuseNone},
			{"admit", "a", refuseClient}, {"admit", "c", refuseFull},
		}},
		{"release frees the client's share", []step{
			{"admit", "a", refuseNone}, {"admit", "a", refuseNone},
			{"release", "a", 0}, {"admit", "a", refuseNone}, {"admit", "a", refuseClient},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAdmission(3, 2)
			for i, s := range tt.steps {
				switch s.op {
				case "admit":
					if got := a.admit(s.client); got != s.want {
						t.Fatalf("step %d: admit(%q) = %v, want %v", i, s.client, got, s.want)
					}
				case "release":
					a.release(s.client)
				}
				sum := 0
				for _, n := range a.byClient {
					if n <= 0 {
						t.Fatalf("step %d: client count %d kept", i, n)
					}
					sum += n
				}
				if sum != a.total {
					t.Fatalf("step %d: per-client counts sum to %d, total %d", i, sum, a.total)
				}
			}
		})
	}
}

func TestClientKey(t *testing.T) {
	tests := []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.ParseIP("10.0.0.7"), Port: 1}, "10.0.0.7"},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:10.0.0.7"), Port: 2}, "10.0.0.7"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:aaaa::1"), Port: 3}, "2001:db8:1:2::/64"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:bbbb::9"), Port: 4}, "2001:db8:1:2::/64"},
		{&net.UnixAddr{Name: "@x", Net: "unix"}, "unix"},
		{nil, ""},
	}
	for _, tt := range tests {
		if got := clientKey(tt.addr); got != tt.want {
			t.Errorf("clientKey(%v) = %q, want %q", tt.addr, got, tt.want)
		}
	}
}

func TestLogLimiter(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := logLimiter{every: 10 * time.Second}
	steps := []struct {
		at             time.Duration
		ok             bool
		wantSuppressed int
	}{
		{0, true, 0},
		{time.Second, false, 0},
		{9 * time.Second, false, 0},
		{10 * time.Second, true, 2},
		{11 * time.Second, false, 0},
		{30 * time.Second, true, 1},
		{41 * time.Second, true, 0},
	}
	for i, s := range steps {
		n, ok := l.allow(t0.Add(s.at))
		if ok != s.ok || n != s.wantSuppressed {
			t.Fatalf("step %d at %v: allow = %d, %v; want %d, %v", i, s.at, n, ok, s.wantSuppressed, s.ok)
		}
	}
}

// countingHandler counts warnings whose message contains match.
type countingHandler struct {
	match string
	n     atomic.Int32
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn && strings.Contains(r.Message, h.match) {
		h.n.Add(1)
	}
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

// dialFrom connects to endpoint from local address ip (any port), so tests
// can play distinct clients on loopback (Linux routes all of 127/8 there).
func dialFrom(t *testing.T, ip, endpoint string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", strings.TrimPrefix(endpoint, endpointTCP))
	if err != nil {
		t.Skipf("cannot dial from %s on this host: %v", ip, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// handshakeRaw runs the client's side of the handshake (no secret) on c.
func handshakeRaw(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	var nonce [nonceLen]byte
	if _, err := c.Write(append(appendHeader(nil, msgHello, nonceLen), nonce[:]...)); err != nil {
		t.Fatal(err)
	}
	if _, err := readFrame(c, msgChallenge, testBlock); err != nil {
		t.Fatalf("read challenge: %v", err)
	}
	if _, err := c.Write(appendHeader(nil, msgAuth, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := readFrame(c, msgReady, testBlock); err != nil {
		t.Fatalf("read READY: %v", err)
	}
}

// TestSlotExhaustion: a client that opens connections as fast as it likes,
// and keeps them (authenticated and idle, or never handshaking), holds at
// most MaxConnsPerClient slots: another client's pull still succeeds. The
// refusals are counted and logged once, not once each. Timeouts are long
// here, so the hostile connections hold their slots for the whole test.
func TestSlotExhaustion(t *testing.T) {
	const maxConns, perClient, attempts = 8, 4, 12
	logs := &countingHandler{match: "refusing connections"}
	src := startSource(t, 4, TCPConfig{
		MaxConns: maxConns, MaxConnsPerClient: perClient,
		HandshakeTimeout: time.Minute, IdleTimeout: time.Minute,
		Logger: slog.New(logs),
	}, 1, 2)
	// One instant for the log's rate limit: every refusal falls in one
	// interval however slowly the test runs.
	src.srv.mu.Lock()
	src.srv.now = func() time.Time { return time.Unix(1000, 0) }
	src.srv.mu.Unlock()
	for i := range attempts {
		c := dialFrom(t, "127.0.0.2", src.endpoint)
		if i%2 == 0 && i < perClient {
			// Half the admitted ones authenticate and idle, half never
			// say a word.
			handshakeRaw(t, c)
		}
	}
	waitFor(t, "the server to admit the client's share and refuse the rest", func() bool {
		st := src.srv.Stats()
		return st.Conns == perClient && st.RefusedClient == attempts-perClient
	})

	dst := newDest(t, Config{Capacity: 4}, TCPConfig{})
	dst.SubmitHint("r", Hint{Source: src.endpoint, Keys: []uint64{1, 2}})
	res, err := dst.Fetch(context.Background(), "r", []uint64{1, 2})
	if err != nil || len(res.Local) != 2 {
		t.Fatalf("other client's fetch: %+v, %v; want both keys", res, err)
	}
	dst.DiscardHint("r")
	checkLocal(t, dst, []uint64{1, 2}, nil)
	if n := logs.n.Load(); n != 1 {
		t.Fatalf("%d refusal warnings for %d refusals within the log interval, want 1", n, attempts-perClient)
	}
}

// TestServerFullRefusal: when every slot is taken (by clients within their
// share), a new connection is refused with an ERROR that says so, and the
// refusal is counted.
func TestServerFullRefusal(t *testing.T) {
	const maxConns, perClient = 4, 2
	src := startSource(t, 4, TCPConfig{
		MaxConns: maxConns, MaxConnsPerClient: perClient,
		HandshakeTimeout: time.Minute, IdleTimeout: time.Minute,
		Logger: slog.New(slog.DiscardHandler),
	}, 1)
	for _, ip := range []string{"127.0.0.2", "127.0.0.3"} {
		for range perClient {
			handshakeRaw(t, dialFrom(t, ip, src.endpoint))
		}
	}
	waitFor(t, "every slot taken", func() bool { return src.srv.Stats().Conns == maxConns })
	// A client that reads first, so the server holds nothing unread from
	// it when it closes, and the ERROR cannot be lost to a reset.
	c := dialFrom(t, "127.0.0.1", src.endpoint)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	_, err := readFrame(c, msgChallenge, testBlock)
	if !errors.Is(err, ErrPeerBusy) || !strings.Contains(err.Error(), "MaxConns") {
		t.Fatalf("connection to a full server: %v, want ErrPeerBusy naming MaxConns", err)
	}
	if st := src.srv.Stats(); st.RefusedFull != 1 || st.RefusedClient != 0 {
		t.Fatalf("stats %+v, want one refusal for a full server", st)
	}
}

// TestIdleConnectionsCut: a connection that does not finish its handshake
// within HandshakeTimeout, or once authenticated sends no FETCH within
// IdleTimeout, is closed and its slot freed; only the former counts as a
// handshake timeout.
func TestIdleConnectionsCut(t *testing.T) {
	var nonce [nonceLen]byte
	hello := append(appendHeader(nil, msgHello, nonceLen), nonce[:]...)
	tests := []struct {
		name          string
		act           func(t *testing.T, c net.Conn)
		wantHandshake uint64
	}{
		{"sends nothing", func(*testing.T, net.Conn) {}, 1},
		{"half a HELLO", func(t *testing.T, c net.Conn) { c.Write(hello[:5]) }, 1},
		{"HELLO, no AUTH", func(t *testing.T, c net.Conn) {
			c.Write(hello)
			if _, err := readFrame(c, msgChallenge, testBlock); err != nil {
				t.Fatal(err)
			}
		}, 1},
		{"authenticated, no FETCH", handshakeRaw, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := startSource(t, 4, TCPConfig{
				HandshakeTimeout: 50 * time.Millisecond, IdleTimeout: 50 * time.Millisecond,
				Logger: slog.New(slog.DiscardHandler),
			}, 1)
			c := dialFrom(t, "127.0.0.1", src.endpoint)
			tt.act(t, c)
			// The server's close ends the read; the deadline only turns a
			// hang into a failure.
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.Copy(io.Discard, c); errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatal("the server kept the connection")
			}
			waitFor(t, "the slot to be freed", func() bool { return src.srv.Stats().Conns == 0 })
			if st := src.srv.Stats(); st.HandshakeTimeouts != tt.wantHandshake {
				t.Fatalf("stats %+v, want %d handshake timeouts", st, tt.wantHandshake)
			}
		})
	}
}
