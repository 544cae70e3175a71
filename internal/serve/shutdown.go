// This file holds the HTTP servers' stop: connections that never sent a request are closed at once.

package serve

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// quietConns tracks an http.Server's connections that have not sent a
// request yet. http.Server.Shutdown counts such a connection as idle only
// once it is 5 s old, so one a client opened just before the stop held
// the stop for 5 s; closing them loses no request in flight.
type quietConns struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// track is the server's ConnState hook.
func (q *quietConns) track(c net.Conn, s http.ConnState) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if s == http.StateNew {
		if q.conns == nil {
			q.conns = map[net.Conn]struct{}{}
		}
		q.conns[c] = struct{}{}
		return
	}
	delete(q.conns, c)
}

// closeAll closes the connections that sent nothing yet.
func (q *quietConns) closeAll() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for c := range q.conns {
		c.Close()
	}
	clear(q.conns)
}

// newHTTPServer is an http.Server for h whose shutdown closes the
// connections that never sent a request.
func newHTTPServer(h http.Handler, q *quietConns) *http.Server {
	s := &http.Server{Handler: h, ReadHeaderTimeout: readHeaderTimeout, ConnState: q.track}
	s.RegisterOnShutdown(q.closeAll)
	return s
}

// readHeaderTimeout bounds how long a client may take to send a request's head.
const readHeaderTimeout = 10 * time.Second

// shutdown stops s within ctx's time, then cuts what still runs.
func shutdown(ctx context.Context, s *http.Server) error {
	err := s.Shutdown(ctx)
	if err != nil {
		// Streams still running past the grace period are cut.
		s.Close()
	}
	return err
}
