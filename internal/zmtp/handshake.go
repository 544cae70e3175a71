// This file holds the connection handshake: greeting and NULL mechanism.

package zmtp

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// Type is a socket type, as the Socket-Type property names it.
type Type string

// The socket types this package implements.
const (
	Pub    Type = "PUB"
	Sub    Type = "SUB"
	Router Type = "ROUTER"
	Dealer Type = "DEALER"
)

// compatible lists the peer types each of ours may talk to (RFC 23,
// "The Socket-Type property").
var compatible = map[Type][]string{
	Pub:    {"SUB", "XSUB"},
	Sub:    {"PUB", "XPUB"},
	Router: {"DEALER", "REQ", "ROUTER"},
	Dealer: {"REP", "DEALER", "ROUTER"},
}

// sendsIdentity: the types whose READY carries an Identity property.
func (t Type) sendsIdentity() bool { return t == Router || t == Dealer }

// peerInfo is what a handshake learned about the peer.
type peerInfo struct {
	greeting
	socketType string
	identity   []byte
}

// handshake exchanges greetings and READY commands on conn within timeout
// (or until ctx ends) and checks that the peer may talk to a socket of type
// self. br must wrap conn; the bytes it buffers past the handshake belong
// to the traffic.
func handshake(ctx context.Context, conn net.Conn, br *bufio.Reader, self Type, identity []byte, timeout time.Duration) (peerInfo, error) {
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return peerInfo{}, err
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	out := appendGreeting(make([]byte, 0, greetingLen+64))
	var props []byte
	props = appendProperty(props, "Socket-Type", []byte(self))
	if self.sendsIdentity() {
		props = appendProperty(props, "Identity", identity)
	}
	out = appendCommand(out, cmdReady, props)
	// Our side goes out while we read the peer's: over a synchronous pipe
	// (inproc) both sides would otherwise block in their first write. A
	// READY sent before the peer's greeting is read is fine: NULL needs
	// nothing from it, and a peer that rejects the greeting closes anyway.
	wrote := make(chan error, 1)
	go func() {
		_, err := conn.Write(out)
		wrote <- err
	}()
	info, err := readHandshake(br, self)
	if err != nil {
		// Unblock our write before waiting for it; the caller closes.
		conn.SetDeadline(time.Unix(1, 0))
		<-wrote
		return info, err
	}
	if err := <-wrote; err != nil {
		return info, fmt.Errorf("zmtp: send greeting: %w", err)
	}
	if !stop() {
		return info, fmt.Errorf("%w: %w", ErrHandshake, ctx.Err())
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		return info, err
	}
	return info, nil
}

// readHandshake reads and checks a peer's greeting and READY.
func readHandshake(r io.Reader, self Type) (peerInfo, error) {
	var buf [greetingLen]byte
	if _, err := io.ReadFull(r, buf[:]); err != nil {
		return peerInfo{}, fmt.Errorf("%w: reading the greeting: %w", ErrHandshake, err)
	}
	g, err := parseGreeting(buf[:])
	if err != nil {
		return peerInfo{greeting: g}, err
	}
	info := peerInfo{greeting: g}
	fr := frameReader{r: r, maxMsg: 0, maxFrames: 0}
	flags, size, err := fr.header()
	if err != nil {
		return info, fmt.Errorf("%w: reading READY: %w", ErrHandshake, unexpected(err))
	}
	if flags&flagCommand == 0 || flags&flagMore != 0 {
		return info, fmt.Errorf("%w: first frame has flags %#02x, want a READY command", ErrHandshake, flags)
	}
	if size > maxCommand {
		return info, fmt.Errorf("%w: READY announces %d bytes, limit %d", ErrTooLarge, size, maxCommand)
	}
	body, err := readBody(r, int64(size))
	if err != nil {
		return info, fmt.Errorf("%w: reading READY: %w", ErrHandshake, err)
	}
	c, err := parseCommand(body)
	if err != nil {
		return info, fmt.Errorf("%w: %w", ErrHandshake, err)
	}
	switch c.name {
	case cmdReady:
	case cmdError:
		reason := c.data
		if len(reason) > 0 && int(reason[0]) <= len(reason)-1 {
			reason = reason[1 : 1+int(reason[0])]
		}
		return info, fmt.Errorf("%w: peer refused: ERROR %q", ErrHandshake, reason)
	default:
		return info, fmt.Errorf("%w: first command is %q, want READY", ErrHandshake, c.name)
	}
	props, err := parseProperties(c.data)
	if err != nil {
		return info, err
	}
	st, ok := props["socket-type"]
	if !ok {
		return info, fmt.Errorf("%w: READY has no Socket-Type", ErrHandshake)
	}
	info.socketType = string(st)
	info.identity = props["identity"]
	ok = false
	for _, t := range compatible[self] {
		ok = ok || strings.EqualFold(info.socketType, t)
	}
	if !ok {
		return info, fmt.Errorf("%w: peer socket type %q cannot talk to %s", ErrHandshake, info.socketType, self)
	}
	if len(info.identity) > shortMax {
		return info, fmt.Errorf("%w: peer identity of %d bytes, limit %d", ErrHandshake, len(info.identity), shortMax)
	}
	return info, nil
}
