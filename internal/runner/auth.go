// This file holds the peer handshake's MAC and nonces, and the parsing of a hint's source endpoint.

package runner

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"net"
	"strings"
)

// The handshake proves both ways that the peers share the secret without
// sending it: each side MACs both nonces under its own label, so neither MAC
// can be replayed or reflected as the other.
func handshakeMAC(secret []byte, label string, first, second *[nonceLen]byte) [macLen]byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	m.Write(first[:])
	m.Write(second[:])
	var out [macLen]byte
	m.Sum(out[:0])
	return out
}

func newNonce() [nonceLen]byte {
	var n [nonceLen]byte
	// crypto/rand.Read never fails on supported platforms (it panics otherwise).
	rand.Read(n[:])
	return n
}

// parseEndpoint turns a hint's source (tcp://host:port) into a dial address.
func parseEndpoint(source string) (string, error) {
	rest, ok := strings.CutPrefix(source, endpointTCP)
	if !ok {
		return "", fmt.Errorf("%w: source endpoint %q: want %shost:port", ErrHint, source, endpointTCP)
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil || host == "" || port == "" || strings.ContainsAny(rest, "/?#") {
		return "", fmt.Errorf("%w: source endpoint %q: want %shost:port", ErrHint, source, endpointTCP)
	}
	return rest, nil
}
