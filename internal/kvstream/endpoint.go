// This file holds ZMQ endpoints: bind or dial, the address a peer dials, a DP rank's endpoint.

package kvstream

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// ErrEndpoint is wrapped by every endpoint error.
var ErrEndpoint = errors.New("kvstream: bad endpoint")

// Binds reports whether an engine given this endpoint binds its socket (and
// the other side must dial), following the engines' own test: a wildcard
// ("*", "::", "0.0.0.0") anywhere, or an ipc/inproc endpoint. Like the
// engines, it treats any "::" as a wildcard, so tcp://[::1]:5557 binds too.
func Binds(endpoint string) bool {
	return strings.Contains(endpoint, "*") ||
		strings.Contains(endpoint, "::") ||
		strings.Contains(endpoint, "0.0.0.0") ||
		strings.HasPrefix(endpoint, schemeIPC) ||
		strings.HasPrefix(endpoint, schemeInproc)
}

// DialAddress turns a bind endpoint into one a peer can dial by replacing a
// wildcard TCP host ("*", "0.0.0.0", "::", "[::]" or empty) with host. Other
// TCP hosts and ipc/inproc endpoints are returned unchanged.
func DialAddress(endpoint, host string) (string, error) {
	if !strings.HasPrefix(endpoint, schemeTCP) {
		if strings.HasPrefix(endpoint, schemeIPC) || strings.HasPrefix(endpoint, schemeInproc) {
			return endpoint, nil
		}
		return "", fmt.Errorf("%w: %q: scheme must be tcp://, ipc:// or inproc://", ErrEndpoint, endpoint)
	}
	h, port, err := net.SplitHostPort(endpoint[len(schemeTCP):])
	if err != nil {
		return "", fmt.Errorf("%w: %q: %w", ErrEndpoint, endpoint, err)
	}
	switch h {
	case "*", "0.0.0.0", "::", "":
	default:
		return endpoint, nil
	}
	if host == "" {
		return "", fmt.Errorf("%w: %q has a wildcard host: host must name a dialable address", ErrEndpoint, endpoint)
	}
	return schemeTCP + net.JoinHostPort(host, port), nil
}

// EndpointForRank gives data-parallel rank its own endpoint the way the
// engines do: rank 0 keeps the endpoint; a TCP port is offset by the rank;
// inproc://x becomes inproc://x_dp{rank}. vLLM refuses ipc endpoints with a
// rank; we suffix them like inproc so that ranks never share a socket path.
func EndpointForRank(endpoint string, rank int) (string, error) {
	if rank < 0 {
		return "", fmt.Errorf("%w: rank %d: rank must be >= 0", ErrEndpoint, rank)
	}
	switch {
	case strings.HasPrefix(endpoint, schemeInproc), strings.HasPrefix(endpoint, schemeIPC):
		if rank == 0 {
			return endpoint, nil
		}
		return endpoint + rankSuffix + strconv.Itoa(rank), nil
	case strings.HasPrefix(endpoint, schemeTCP):
		i := strings.LastIndexByte(endpoint, ':')
		if i < len(schemeTCP) {
			return "", fmt.Errorf("%w: %q: tcp endpoint must include a port", ErrEndpoint, endpoint)
		}
		port, err := strconv.Atoi(endpoint[i+1:])
		if err != nil || port < 0 || port > maxPort {
			return "", fmt.Errorf("%w: %q: port must be a number in 0..%d", ErrEndpoint, endpoint, maxPort)
		}
		if rank == 0 {
			return endpoint, nil
		}
		if port+rank > maxPort {
			return "", fmt.Errorf("%w: %q: port %d + rank %d exceeds %d", ErrEndpoint, endpoint, port, rank, maxPort)
		}
		return endpoint[:i+1] + strconv.Itoa(port+rank), nil
	}
	return "", fmt.Errorf("%w: %q: scheme must be tcp://, ipc:// or inproc://", ErrEndpoint, endpoint)
}
