// This file holds the ZMTP wire format: greeting, frame headers and errors.

package zmtp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// Wire facts (RFC 23 and 37).
const (
	greetingLen = 64
	sigFirst    = 0xFF // greeting byte 0
	sigLast     = 0x7F // greeting byte 9
	// The version we announce. A peer announcing 3.0 is spoken to in 3.0
	// (subscriptions as messages); a higher one in 3.1.
	versionMajor = 3
	versionMinor = 1
	mechLen      = 20 // mechanism field, NUL-padded
	mechNull     = "NULL"

	flagMore     = 0x01
	flagLong     = 0x02
	flagCommand  = 0x04
	flagReserved = 0xF8

	shortMax = 255

	// maxCommand bounds a command body: a READY with its properties or a
	// subscription is far smaller.
	maxCommand = 64 << 10
	// readAhead is how far a body buffer may run ahead of the bytes read.
	readAhead = 32 << 10
)

// Command names.
const (
	cmdReady     = "READY"
	cmdError     = "ERROR"
	cmdPing      = "PING"
	cmdPong      = "PONG"
	cmdSubscribe = "SUBSCRIBE"
	cmdCancel    = "CANCEL"
)

var (
	// ErrProtocol is wrapped by every error about a peer's bytes.
	ErrProtocol = errors.New("zmtp: protocol error")
	// ErrHandshake is wrapped by every handshake failure.
	ErrHandshake = fmt.Errorf("%w: handshake", ErrProtocol)
	// ErrTooLarge: a message exceeds MaxMsgSize or MaxFrames, or a command
	// exceeds 64 KiB. It is an ErrProtocol.
	ErrTooLarge = fmt.Errorf("%w: message too large", ErrProtocol)
	// ErrClosed is returned by a closed socket.
	ErrClosed = errors.New("zmtp: socket closed")
	// ErrNoPeer: a ROUTER was asked to send to an identity it does not know.
	ErrNoPeer = errors.New("zmtp: no such peer")
	// ErrEndpoint is wrapped by every bad endpoint.
	ErrEndpoint = errors.New("zmtp: bad endpoint")
	// ErrType: the operation does not apply to the socket's type.
	ErrType = errors.New("zmtp: operation not supported by the socket type")
)

// greeting is what a peer's greeting says.
type greeting struct {
	major, minor byte
	mechanism    string
	asServer     byte
}

// appendGreeting appends our greeting: signature (0xFF, 8 bytes of padding,
// 0x7F), version, mechanism NULL, as-server 0, filler.
func appendGreeting(dst []byte) []byte {
	var g [greetingLen]byte
	g[0], g[9] = sigFirst, sigLast
	g[10], g[11] = versionMajor, versionMinor
	copy(g[12:12+mechLen], mechNull)
	return append(dst, g[:]...)
}

// parseGreeting checks a peer's 64-byte greeting. The padding and filler
// are ignored, as the RFCs ask.
func parseGreeting(b []byte) (greeting, error) {
	if len(b) != greetingLen {
		return greeting{}, fmt.Errorf("%w: greeting is %d bytes, want %d", ErrHandshake, len(b), greetingLen)
	}
	if b[0] != sigFirst || b[9] != sigLast {
		return greeting{}, fmt.Errorf("%w: bad greeting signature % x", ErrHandshake, b[:10])
	}
	g := greeting{major: b[10], minor: b[11], asServer: b[32]}
	if g.major < versionMajor {
		return g, fmt.Errorf("%w: peer speaks ZMTP %d.%d, want 3.0 or later", ErrHandshake, g.major, g.minor)
	}
	mech := b[12 : 12+mechLen]
	name := mech
	if i := bytes.IndexByte(mech, 0); i >= 0 {
		name = mech[:i]
		if bytes.ContainsFunc(mech[i:], func(r rune) bool { return r != 0 }) {
			return g, fmt.Errorf("%w: mechanism field %q is not NUL-padded", ErrHandshake, mech)
		}
	}
	g.mechanism = string(name)
	if g.mechanism != mechNull {
		return g, fmt.Errorf("%w: peer mechanism %q, only NULL is supported", ErrHandshake, g.mechanism)
	}
	return g, nil
}

// speaks31 reports whether a peer's greeting allows the 3.1 commands.
func (g greeting) speaks31() bool {
	return g.major > versionMajor || g.minor >= 1
}

// appendFrameHeader appends the flags and size of a frame of n bytes.
func appendFrameHeader(dst []byte, flags byte, n int) []byte {
	if n <= shortMax {
		return append(dst, flags, byte(n))
	}
	dst = append(dst, flags|flagLong)
	return binary.BigEndian.AppendUint64(dst, uint64(n))
}

// appendCommand appends a whole command frame: name size, name, data.
func appendCommand(dst []byte, name string, data ...[]byte) []byte {
	n := 1 + len(name)
	for _, d := range data {
		n += len(d)
	}
	dst = appendFrameHeader(dst, flagCommand, n)
	dst = append(dst, byte(len(name)))
	dst = append(dst, name...)
	for _, d := range data {
		dst = append(dst, d...)
	}
	return dst
}

// appendProperty appends one metadata property of a READY command.
func appendProperty(dst []byte, name string, value []byte) []byte {
	dst = append(dst, byte(len(name)))
	dst = append(dst, name...)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(value)))
	return append(dst, value...)
}

// command is a parsed command frame.
type command struct {
	name string
	data []byte
}

// parseCommand splits a command body into name and data.
func parseCommand(body []byte) (command, error) {
	if len(body) == 0 {
		return command{}, fmt.Errorf("%w: empty command frame", ErrProtocol)
	}
	n := int(body[0])
	if n == 0 || 1+n > len(body) {
		return command{}, fmt.Errorf("%w: command name of %d bytes in a %d-byte command", ErrProtocol, n, len(body))
	}
	return command{name: string(body[1 : 1+n]), data: body[1+n:]}, nil
}

// parseProperties reads the metadata of a READY command. Names compare
// case-insensitively, so they are returned lower-cased; values alias data.
func parseProperties(data []byte) (map[string][]byte, error) {
	props := make(map[string][]byte)
	for len(data) > 0 {
		n := int(data[0])
		if n == 0 || 1+n+4 > len(data) {
			return nil, fmt.Errorf("%w: READY property name of %d bytes with %d bytes left", ErrHandshake, n, len(data)-1)
		}
		name := string(bytes.ToLower(data[1 : 1+n]))
		data = data[1+n:]
		size := binary.BigEndian.Uint32(data)
		data = data[4:]
		if uint64(size) > uint64(len(data)) {
			return nil, fmt.Errorf("%w: READY property %q announces %d bytes with %d left", ErrHandshake, name, size, len(data))
		}
		props[name] = data[:size:size]
		data = data[size:]
	}
	return props, nil
}
