// This file holds the transports: tcp://, ipc:// and inproc:// endpoints.

package zmtp

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

const (
	schemeTCP    = "tcp://"
	schemeIPC    = "ipc://"
	schemeInproc = "inproc://"
)

// endpoint is a parsed ZMQ endpoint.
type endpoint struct {
	network string // "tcp", "unix" or "inproc"
	addr    string
}

func (e endpoint) String() string {
	switch e.network {
	case "unix":
		return schemeIPC + e.addr
	case "inproc":
		return schemeInproc + e.addr
	}
	return schemeTCP + e.addr
}

// parseEndpoint parses tcp://host:port (host "*" means every interface,
// for binding), ipc://path and inproc://name.
func parseEndpoint(s string, bind bool) (endpoint, error) {
	switch {
	case strings.HasPrefix(s, schemeTCP):
		host, port, err := net.SplitHostPort(s[len(schemeTCP):])
		if err != nil {
			return endpoint{}, fmt.Errorf("%w: %q: %w", ErrEndpoint, s, err)
		}
		if host == "*" {
			if !bind {
				return endpoint{}, fmt.Errorf("%w: %q: cannot connect to a wildcard host", ErrEndpoint, s)
			}
			host = ""
		}
		if !bind && (host == "" || port == "0") {
			return endpoint{}, fmt.Errorf("%w: %q: connecting needs a host and a port", ErrEndpoint, s)
		}
		return endpoint{network: "tcp", addr: net.JoinHostPort(host, port)}, nil
	case strings.HasPrefix(s, schemeIPC):
		if len(s) == len(schemeIPC) {
			return endpoint{}, fmt.Errorf("%w: %q: empty ipc path", ErrEndpoint, s)
		}
		return endpoint{network: "unix", addr: s[len(schemeIPC):]}, nil
	case strings.HasPrefix(s, schemeInproc):
		if len(s) == len(schemeInproc) {
			return endpoint{}, fmt.Errorf("%w: %q: empty inproc name", ErrEndpoint, s)
		}
		return endpoint{network: "inproc", addr: s[len(schemeInproc):]}, nil
	}
	return endpoint{}, fmt.Errorf("%w: %q: scheme must be tcp://, ipc:// or inproc://", ErrEndpoint, s)
}

func (e endpoint) listen() (net.Listener, error) {
	if e.network == "inproc" {
		return listenInproc(e.addr)
	}
	return net.Listen(e.network, e.addr)
}

func (e endpoint) dial(ctx context.Context, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if e.network == "inproc" {
		return dialInproc(ctx, e.addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, e.network, e.addr)
}

// inproc endpoints live in this process: a listener hands each dialer one
// end of a net.Pipe.
var inprocs = struct {
	sync.Mutex
	m map[string]*inprocListener
}{m: make(map[string]*inprocListener)}

type inprocListener struct {
	name  string
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

type inprocAddr string

func (a inprocAddr) Network() string { return "inproc" }
func (a inprocAddr) String() string  { return string(a) }

func listenInproc(name string) (net.Listener, error) {
	inprocs.Lock()
	defer inprocs.Unlock()
	if _, ok := inprocs.m[name]; ok {
		return nil, fmt.Errorf("zmtp: inproc://%s: address in use", name)
	}
	l := &inprocListener{name: name, conns: make(chan net.Conn), done: make(chan struct{})}
	inprocs.m[name] = l
	return l, nil
}

func dialInproc(ctx context.Context, name string) (net.Conn, error) {
	inprocs.Lock()
	l := inprocs.m[name]
	inprocs.Unlock()
	if l == nil {
		return nil, fmt.Errorf("zmtp: inproc://%s: connection refused (nothing bound)", name)
	}
	a, b := net.Pipe()
	select {
	case l.conns <- b:
		return a, nil
	case <-l.done:
		return nil, fmt.Errorf("zmtp: inproc://%s: connection refused (closed)", name)
	case <-ctx.Done():
		return nil, fmt.Errorf("zmtp: inproc://%s: %w", name, ctx.Err())
	}
}

func (l *inprocListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *inprocListener) Close() error {
	l.once.Do(func() {
		close(l.done)
		inprocs.Lock()
		if inprocs.m[l.name] == l {
			delete(inprocs.m, l.name)
		}
		inprocs.Unlock()
	})
	return nil
}

func (l *inprocListener) Addr() net.Addr { return inprocAddr(l.name) }
