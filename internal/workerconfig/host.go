// This file holds the checks of hosts peers dial, and ZMQ endpoints with their per-rank offsets.

package workerconfig

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Resolver returns the addresses of a host name, like net.Resolver.LookupHost
// without the context. It is injected so validation stays a pure function and
// tests decide what "localhost" or a pod name resolves to.
type Resolver func(host string) ([]string, error)

// hostProblem says why a host cannot be dialed by peers; empty means fine.
// urlHost is the host as written inside tcp:// (IPv6 bracketed).
func hostProblem(raw string) (urlHost string, problem string) {
	return checkHost(raw, false)
}

// checkHost is hostProblem with loopback hosts accepted when every peer runs
// on this machine (Options.AllowLoopback); wildcards and unspecified
// addresses stay refused, since nobody can dial them.
func checkHost(raw string, allowLoopback bool) (urlHost string, problem string) {
	switch {
	case raw == "":
		return "", "is empty"
	case raw == "*":
		return "", "is the wildcard *, which peers cannot dial"
	case strings.ContainsAny(raw, " \t\r\n"):
		return "", fmt.Sprintf("%q contains whitespace", raw)
	case strings.Contains(raw, "://"):
		return "", fmt.Sprintf("%q must be a bare host, without a scheme", raw)
	case strings.Contains(raw, "/"):
		return "", fmt.Sprintf("%q must be a bare host, without a path", raw)
	case strings.ContainsAny(raw, "?#@;,"):
		return "", fmt.Sprintf("%q is not a host", raw)
	}
	host := raw
	if strings.HasPrefix(raw, "[") {
		end := strings.IndexByte(raw, ']')
		if end < 0 {
			return "", fmt.Sprintf("%q has an unclosed [", raw)
		}
		if end != len(raw)-1 {
			return "", fmt.Sprintf("%q must not carry a port; set the port in its own option", raw)
		}
		host = raw[1:end]
		if !strings.Contains(host, ":") {
			return "", fmt.Sprintf("%q: brackets are only for IPv6 addresses", raw)
		}
	}
	if addr, err := netip.ParseAddr(host); err == nil {
		return addrProblem(raw, addr, allowLoopback)
	}
	if strings.Contains(host, ":") {
		if _, err := netip.ParseAddrPort(host); err == nil || strings.Count(host, ":") == 1 {
			return "", fmt.Sprintf("%q must not carry a port; set the port in its own option", raw)
		}
		return "", fmt.Sprintf("%q is not a valid IPv6 address", raw)
	}
	if p := hostnameProblem(host); p != "" {
		return "", fmt.Sprintf("%q %s", raw, p)
	}
	if isLocalhostName(host) && !allowLoopback {
		return "", fmt.Sprintf("%q is a loopback name, which peers cannot dial", raw)
	}
	return host, ""
}

func addrProblem(raw string, addr netip.Addr, allowLoopback bool) (string, string) {
	if addr.Zone() != "" {
		return "", fmt.Sprintf("%q carries an IPv6 zone, which only this host understands", raw)
	}
	addr = addr.Unmap()
	switch {
	case addr.IsUnspecified():
		return "", fmt.Sprintf("%q is the unspecified address, which peers cannot dial", raw)
	case addr.IsLoopback() && !allowLoopback:
		return "", fmt.Sprintf("%q is a loopback address, which peers cannot dial", raw)
	case addr.IsMulticast():
		return "", fmt.Sprintf("%q is a multicast address", raw)
	}
	if addr.Is6() {
		return "[" + addr.String() + "]", ""
	}
	return addr.String(), ""
}

// hostnameProblem checks RFC 1123 shape (underscores tolerated: some
// orchestrators generate them). All-numeric names are mistyped IPv4.
func hostnameProblem(host string) string {
	host = strings.TrimSuffix(host, ".")
	if host == "" || len(host) > 253 {
		return "is not a valid host name"
	}
	numeric := true
	for _, label := range strings.Split(host, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return "is not a valid host name"
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			switch {
			case c >= '0' && c <= '9':
			case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '-', c == '_':
				numeric = false
			default:
				return "is not a valid host name"
			}
		}
	}
	if numeric {
		return "is not a valid IPv4 address"
	}
	return ""
}

// isLocalhostName: RFC 6761 reserves localhost and *.localhost for loopback,
// whatever a resolver says.
func isLocalhostName(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	return h == "localhost" || strings.HasSuffix(h, ".localhost")
}

// peerHost validates a host that other machines dial and returns its tcp://
// form. guidance tells the operator which option to set; it is appended to
// every failure. A name that cannot be resolved here is accepted with a
// warning: peers may resolve it where this agent cannot. allowLoopback
// accepts loopback literals, names and resolutions (single-host clusters).
func peerHost(raw, option, guidance string, lookup Resolver, allowLoopback bool) (urlHost, warning string, err error) {
	urlHost, problem := checkHost(raw, allowLoopback)
	if problem != "" {
		return "", "", configErr(ErrUndialableHost, option, "%s; %s", problem, guidance)
	}
	if strings.HasPrefix(urlHost, "[") || lookup == nil {
		return urlHost, "", nil
	}
	if _, err := netip.ParseAddr(urlHost); err == nil {
		return urlHost, "", nil
	}
	addrs, lerr := lookup(urlHost)
	if lerr != nil {
		return urlHost, fmt.Sprintf("%s: %q does not resolve on this host (%v); peers must resolve it", option, raw, lerr), nil
	}
	for _, a := range addrs {
		addr, perr := netip.ParseAddr(a)
		if perr != nil {
			continue
		}
		addr = addr.Unmap()
		if (addr.IsLoopback() && !allowLoopback) || addr.IsUnspecified() {
			return "", "", configErr(ErrUndialableHost, option,
				"%q resolves to %s, which peers cannot dial; %s", raw, addr, guidance)
		}
	}
	return urlHost, "", nil
}

// zmqEndpoint is a parsed ZMQ address.
type zmqEndpoint struct {
	scheme string // schemeTCP, schemeIPC or schemeInproc
	host   string // tcp: bare host, "*" allowed; ipc: path; inproc: name
	port   int    // tcp only
}

func parseZMQ(s, option string) (zmqEndpoint, error) {
	var e zmqEndpoint
	switch {
	case strings.HasPrefix(s, schemeTCP):
		e.scheme = schemeTCP
	case strings.HasPrefix(s, schemeIPC):
		e.scheme, e.host = schemeIPC, s[len(schemeIPC):]
	case strings.HasPrefix(s, schemeInproc):
		e.scheme, e.host = schemeInproc, s[len(schemeInproc):]
	default:
		return e, configErr(nil, option, "%q must start with tcp://, ipc:// or inproc://", s)
	}
	if e.scheme != schemeTCP {
		if e.host == "" {
			return e, configErr(nil, option, "%q names no address", s)
		}
		return e, nil
	}
	rest := s[len(schemeTCP):]
	i := strings.LastIndexByte(rest, ':')
	if i < 0 {
		return e, configErr(ErrInvalidPort, option, "%q needs a port (tcp://host:port)", s)
	}
	host, portText := rest[:i], rest[i+1:]
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
		if _, err := netip.ParseAddr(host); err != nil || !strings.Contains(host, ":") {
			return e, configErr(nil, option, "%q: the bracketed host is not an IPv6 address", s)
		}
	} else if strings.Contains(host, ":") {
		return e, configErr(nil, option, "%q: write an IPv6 host in brackets, e.g. tcp://[fd00::1]:5557", s)
	} else if host != "*" && hostnameProblem(host) != "" {
		if _, err := netip.ParseAddr(host); err != nil {
			return e, configErr(nil, option, "%q: %q is not a host", s, host)
		}
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 1 || port > 65535 {
		return e, configErr(ErrInvalidPort, option, "%q: port must be a number in 1..65535", s)
	}
	e.host, e.port = host, port
	return e, nil
}

func (e zmqEndpoint) String() string {
	if e.scheme != schemeTCP {
		return e.scheme + e.host
	}
	return schemeTCP + bracket(e.host) + ":" + strconv.Itoa(e.port)
}

func bracket(host string) string {
	if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") {
		return "[" + host + "]"
	}
	return host
}

// offset applies the per-DP-rank offset engines apply to their event
// endpoints (docs/wire.md §2.2): TCP port + rank, inproc name + "_dp{rank}". An ipc
// path cannot be offset: the engine itself refuses it for rank > 0.
func (e zmqEndpoint) offset(rank int, option string) (zmqEndpoint, error) {
	if rank == 0 {
		return e, nil
	}
	switch e.scheme {
	case schemeTCP:
		if e.port+rank > 65535 {
			return e, configErr(ErrInvalidPort, option, "port %d + DP rank %d exceeds 65535; lower the port", e.port, rank)
		}
		e.port += rank
	case schemeInproc:
		e.host += "_dp" + strconv.Itoa(rank)
	default:
		return e, configErr(nil, option, "%s endpoints cannot be offset per DP rank (rank %d); use a tcp:// endpoint", e.scheme, rank)
	}
	return e, nil
}

// publisherBinds is the engine's own rule for its PUB socket, applied to the
// text as written, as the engine does. Newer SGLang added 0.0.0.0 to the
// wildcards; vLLM's ZmqEventPublisher did not and connects to it.
func publisherBinds(engine Engine, s string) bool {
	return strings.Contains(s, "*") || strings.Contains(s, "::") ||
		(engine == EngineSGLang && strings.Contains(s, "0.0.0.0")) ||
		strings.HasPrefix(s, schemeIPC) || strings.HasPrefix(s, schemeInproc)
}

// connectTarget refuses a PUB that would connect to the unspecified
// address. It names no host (some kernels route it to loopback, others
// refuse it), so the operator surely meant the engine to bind, as newer
// SGLang does for 0.0.0.0; taken as written, the events would never reach an
// agent elsewhere, and nothing would say so. It catches vLLM's tcp://0.0.0.0
// and, on either engine, an IPv6 unspecified address written without "::".
func connectTarget(ev *eventsConfig, engine Engine) error {
	if ev.binds || ev.endpoint.scheme != schemeTCP {
		return nil
	}
	addr, err := netip.ParseAddr(ev.endpoint.host)
	if err != nil || !addr.IsUnspecified() {
		return nil
	}
	name, wildcards := "vLLM", "*, ::"
	if engine == EngineSGLang {
		name, wildcards = "SGLang", "*, ::, 0.0.0.0"
	}
	return configErr(ErrUndialableHost, ev.option,
		"%q makes %s connect, not bind (it binds only for %s, ipc:// and inproc://), and the unspecified address names no host to connect to; use tcp://*:%d to have %s bind, or a concrete host address for the agent to listen on",
		ev.raw, name, wildcards, ev.endpoint.port, name)
}

// dialable replaces a wildcard or unspecified bind host by the host a
// subscriber should dial.
func (e zmqEndpoint) dialable(host string) zmqEndpoint {
	if e.scheme != schemeTCP {
		return e
	}
	bare := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if e.host == "*" {
		e.host = bare
	} else if addr, err := netip.ParseAddr(e.host); err == nil && addr.IsUnspecified() {
		e.host = bare
	}
	return e
}
