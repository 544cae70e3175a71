// This file holds peer admission: connection slots per client and in all, and rate-limited warnings.

package runner

import (
	"net"
	"net/netip"
	"time"
)

// refusal says why a connection was refused; refuseNone admits it.
type refusal uint8

const (
	refuseNone   refusal = iota
	refuseFull           // MaxConns connections are open
	refuseClient         // MaxConnsPerClient connections are open from its client
)

func (r refusal) String() string {
	switch r {
	case refuseFull:
		return "full"
	case refuseClient:
		return "client_limit"
	}
	return "admitted"
}

// admission counts open connections in all and per client. It is pure: the
// server calls it under its lock.
type admission struct {
	maxConns, perClient int
	total               int
	byClient            map[string]int
}

func newAdmission(maxConns, perClient int) *admission {
	return &admission{maxConns: maxConns, perClient: perClient, byClient: make(map[string]int)}
}

// admit takes a slot for a connection from client, or says why not. The
// per-client limit is checked first, so a client over its share is told so
// even when the server is also full.
func (a *admission) admit(client string) refusal {
	if a.byClient[client] >= a.perClient {
		return refuseClient
	}
	if a.total >= a.maxConns {
		return refuseFull
	}
	a.byClient[client]++
	a.total++
	return refuseNone
}

// release frees the slot of one of client's admitted connections.
func (a *admission) release(client string) {
	a.total--
	if n := a.byClient[client] - 1; n > 0 {
		a.byClient[client] = n
	} else {
		delete(a.byClient, client)
	}
}

// clientKey is what connections from one client share: its IP address, or
// its IPv6 /64, the least a single host is routed (one host can take every
// address of its /64 at will). Other kinds of address count as one client.
func clientKey(addr net.Addr) string {
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		if addr == nil {
			return ""
		}
		return addr.Network()
	}
	ip := ta.AddrPort().Addr().Unmap()
	if ip.Is6() {
		return netip.PrefixFrom(ip, 64).Masked().String()
	}
	return ip.String()
}

// logLimiter lets one log line through per interval and counts the ones it
// held back, so that a flood of refusals costs a line every interval, not a
// line each.
type logLimiter struct {
	every      time.Duration
	last       time.Time
	suppressed int
}

// allow reports whether to log at now and, if so, how many lines it held
// back since the last one it let through.
func (l *logLimiter) allow(now time.Time) (suppressed int, ok bool) {
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		l.suppressed++
		return 0, false
	}
	suppressed, l.suppressed, l.last = l.suppressed, 0, now
	return suppressed, true
}
