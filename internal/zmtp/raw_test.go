package zmtp

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// rawPeer plays a ZMTP peer byte by byte.
type rawPeer struct {
	t    testing.TB
	c    net.Conn
	br   *bufio.Reader
	fr   frameReader
	info peerInfo // what our socket said in its handshake
}

// greetingFor is a greeting announcing ZMTP 3.minor.
func greetingFor(minor byte) []byte {
	return greetingWith(func(g []byte) { g[11] = minor })
}

// readyFor is a READY command of a socket of type typ.
func readyFor(typ string, identity string) []byte {
	props := appendProperty(nil, "Socket-Type", []byte(typ))
	if identity != "" {
		props = appendProperty(props, "Identity", []byte(identity))
	}
	return appendCommand(nil, cmdReady, props)
}

// newRawPeer wraps an open connection.
func newRawPeer(t testing.TB, c net.Conn) *rawPeer {
	br := bufio.NewReader(c)
	return &rawPeer{t: t, c: c, br: br, fr: frameReader{r: br, maxMsg: 1 << 30, maxFrames: 1 << 10}}
}

// dialRaw connects to ep without a handshake.
func dialRaw(t testing.TB, ep string) *rawPeer {
	return newRawPeer(t, rawDial(t, ep))
}

// handshakeRaw connects to ep and handshakes as a typ socket speaking
// ZMTP 3.minor.
func handshakeRaw(t testing.TB, ep string, typ string, minor byte) *rawPeer {
	t.Helper()
	p := dialRaw(t, ep)
	p.handshake(typ, minor)
	return p
}

func (p *rawPeer) handshake(typ string, minor byte) {
	p.t.Helper()
	p.write(greetingFor(minor), readyFor(typ, ""))
	self := Type(strings.TrimPrefix(typ, "X"))
	info, err := readHandshake(p.br, self)
	if err != nil {
		p.t.Fatalf("raw handshake: %v", err)
	}
	p.info = info
}

func (p *rawPeer) write(parts ...[]byte) {
	p.t.Helper()
	if _, err := p.c.Write(cat(parts...)); err != nil {
		p.t.Fatalf("raw write: %v", err)
	}
}

// next reads a message ("a|b") or command ("!NAME:data").
func (p *rawPeer) next() (string, error) {
	msg, cmd, err := p.fr.next()
	if err != nil {
		return "", err
	}
	if cmd != nil {
		return "!" + cmd.name + ":" + string(cmd.data), nil
	}
	out := ""
	for i, f := range msg {
		if i > 0 {
			out += "|"
		}
		out += string(f)
	}
	return out, nil
}

func (p *rawPeer) expect(want string) {
	p.t.Helper()
	got, err := p.next()
	if err != nil || got != want {
		p.t.Fatalf("raw peer read %q, %v; want %q", got, err, want)
	}
}

// expectClosed waits for our side to close the connection.
func (p *rawPeer) expectClosed() {
	p.t.Helper()
	p.c.SetReadDeadline(time.Now().Add(waitLimit))
	_, err := io.Copy(io.Discard, p.br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		p.t.Fatal("the connection was not closed")
	}
}

// rawListener accepts connections for tests where our socket dials.
func rawListener(t testing.TB) (ep string, accept func() *rawPeer) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return "tcp://" + l.Addr().String(), func() *rawPeer {
		t.Helper()
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(waitLimit))
		return newRawPeer(t, c)
	}
}
