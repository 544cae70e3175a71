// This file holds the peer protocol's frames: headers, FETCH, handshake, BLOCK, MISSING, ERROR.

package runner

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The peer protocol: length-prefixed binary frames over one TCP stream.
//
//	frame  = magic "KR" | version u8 | type u8 | payload length u32 BE | payload
//
// A connection opens with a handshake, then carries fetches one at a time:
//
//	client → HELLO     client nonce [16]
//	server ← CHALLENGE flags u8 | block bytes u32 | max keys u32 | server nonce [16] | server MAC [32]
//	client → AUTH      client MAC [32] (empty when the server asks for none)
//	server ← READY     (empty) or ERROR
//	client → FETCH     count u32 | keys u64 × count
//	server ← BLOCK     key u64 | xxh3 u64 | block bytes   or   MISSING key u64, one per key in order
//	server ← END       (empty)
//
// A liveness probe sends PING instead of HELLO and needs no secret: the
// server answers PONG with its runner's start epoch and closes.
//
//	client → PING      (empty)
//	server ← PONG      epoch u64
//
// Integers are big-endian. Every frame's length is checked against what its
// type may carry before any payload is read, so a peer cannot make us buffer
// more than one block.
//
// Checksum: XXH3-64 (seed 0) of the block, from github.com/zeebo/xxh3. It is
// faster than CRC32C on large blocks on amd64 and arm64 and, at 64 bits,
// leaves no practical chance for a torn or misrouted block to pass.
const (
	wireMagic0  = 'K'
	wireMagic1  = 'R'
	wireVersion = 1
	headerLen   = 8

	msgHello     = 1
	msgChallenge = 2
	msgAuth      = 3
	msgReady     = 4
	msgFetch     = 5
	msgBlock     = 6
	msgMissing   = 7
	msgEnd       = 8
	msgError     = 9
	msgPing      = 10
	msgPong      = 11

	nonceLen      = 16
	macLen        = 32
	challengeLen  = 1 + 4 + 4 + nonceLen + macLen
	blockHeadLen  = 16
	epochLen      = 8
	maxErrorText  = 1024
	flagAuth      = 1 // CHALLENGE flags: the server requires AUTH with a MAC
	macLabelSrv   = "kvrouter-runner/1 server"
	macLabelCli   = "kvrouter-runner/1 client"
	endpointTCP   = "tcp://"
	fetchCountLen = 4

	// Error codes carried by ERROR frames.
	codeAuth     = 1
	codeProtocol = 2
	codeTooLarge = 3
	codeBusy     = 4
)

// Wire errors.
var (
	// ErrProtocol: the peer broke the protocol (bad magic, version, type,
	// length, or an answer for a key it was not asked).
	ErrProtocol = errors.New("peer protocol violation")
	// ErrFrameTooLarge: a frame is longer than its type allows.
	ErrFrameTooLarge = errors.New("frame too large")
	// ErrChecksum: a block's bytes do not match its checksum.
	ErrChecksum = errors.New("block checksum mismatch")
	// ErrAuth: the peers do not share the secret.
	ErrAuth = errors.New("peer authentication failed")
	// ErrPeerBusy: the peer refused the connection, having as many open as
	// it serves in all or from this client.
	ErrPeerBusy = errors.New("peer refused the connection: too many connections")
)

type header struct {
	typ uint8
	n   int
}

func putHeader(b []byte, typ uint8, n int) {
	b[0], b[1], b[2], b[3] = wireMagic0, wireMagic1, wireVersion, typ
	binary.BigEndian.PutUint32(b[4:8], uint32(n))
}

func appendHeader(b []byte, typ uint8, n int) []byte {
	var h [headerLen]byte
	putHeader(h[:], typ, n)
	return append(b, h[:]...)
}

// parseHeader decodes a frame header and checks its length against the most
// the type may carry (limit), so the caller can refuse before reading.
func parseHeader(b []byte, limit func(typ uint8) (min, max int, ok bool)) (header, error) {
	if len(b) < headerLen {
		return header{}, fmt.Errorf("%w: short header (%d bytes)", ErrProtocol, len(b))
	}
	if b[0] != wireMagic0 || b[1] != wireMagic1 {
		return header{}, fmt.Errorf("%w: bad magic %#02x%02x", ErrProtocol, b[0], b[1])
	}
	if b[2] != wireVersion {
		return header{}, fmt.Errorf("%w: version %d, want %d", ErrProtocol, b[2], wireVersion)
	}
	h := header{typ: b[3], n: int(binary.BigEndian.Uint32(b[4:8]))}
	lo, hi, ok := limit(h.typ)
	if !ok {
		return header{}, fmt.Errorf("%w: unexpected message type %d", ErrProtocol, h.typ)
	}
	if h.n > hi {
		return header{}, fmt.Errorf("%w: type %d frame of %d bytes, at most %d allowed", ErrFrameTooLarge, h.typ, h.n, hi)
	}
	if h.n < lo {
		return header{}, fmt.Errorf("%w: type %d frame of %d bytes, at least %d needed", ErrProtocol, h.typ, h.n, lo)
	}
	return h, nil
}

// serverLimits bounds the frames a server accepts from a client.
func serverLimits(maxKeys int) func(uint8) (int, int, bool) {
	return func(typ uint8) (int, int, bool) {
		switch typ {
		case msgHello:
			return nonceLen, nonceLen, true
		case msgPing:
			return 0, 0, true
		case msgAuth:
			return 0, macLen, true
		case msgFetch:
			return fetchCountLen, fetchCountLen + 8*maxKeys, true
		}
		return 0, 0, false
	}
}

// clientLimits bounds the frames a client accepts from a server.
func clientLimits(blockBytes int) func(uint8) (int, int, bool) {
	return func(typ uint8) (int, int, bool) {
		switch typ {
		case msgChallenge:
			return challengeLen, challengeLen, true
		case msgReady, msgEnd:
			return 0, 0, true
		case msgBlock:
			return blockHeadLen + blockBytes, blockHeadLen + blockBytes, true
		case msgMissing:
			return 8, 8, true
		case msgPong:
			return epochLen, epochLen, true
		case msgError:
			return 2, 2 + maxErrorText, true
		}
		return 0, 0, false
	}
}

func appendFetch(b []byte, keys []uint64) []byte {
	b = appendHeader(b, msgFetch, fetchCountLen+8*len(keys))
	b = binary.BigEndian.AppendUint32(b, uint32(len(keys)))
	for _, k := range keys {
		b = binary.BigEndian.AppendUint64(b, k)
	}
	return b
}

// parseFetch decodes a FETCH payload into dst (reused).
func parseFetch(p []byte, dst []uint64) ([]uint64, error) {
	if len(p) < fetchCountLen {
		return dst, fmt.Errorf("%w: short fetch", ErrProtocol)
	}
	n := binary.BigEndian.Uint32(p)
	p = p[fetchCountLen:]
	if uint64(len(p)) != 8*uint64(n) {
		return dst, fmt.Errorf("%w: fetch of %d keys carries %d bytes", ErrProtocol, n, len(p))
	}
	if n == 0 {
		return dst, fmt.Errorf("%w: fetch of no keys", ErrProtocol)
	}
	dst = dst[:0]
	for i := 0; i < len(p); i += 8 {
		dst = append(dst, binary.BigEndian.Uint64(p[i:]))
	}
	return dst, nil
}

type challenge struct {
	auth       bool
	blockBytes int
	maxKeys    int
	nonce      [nonceLen]byte
	mac        [macLen]byte
}

func appendChallenge(b []byte, c challenge) []byte {
	b = appendHeader(b, msgChallenge, challengeLen)
	var flags byte
	if c.auth {
		flags |= flagAuth
	}
	b = append(b, flags)
	b = binary.BigEndian.AppendUint32(b, uint32(c.blockBytes))
	b = binary.BigEndian.AppendUint32(b, uint32(c.maxKeys))
	b = append(b, c.nonce[:]...)
	return append(b, c.mac[:]...)
}

func parseChallenge(p []byte) (challenge, error) {
	if len(p) != challengeLen {
		return challenge{}, fmt.Errorf("%w: challenge of %d bytes", ErrProtocol, len(p))
	}
	if p[0]&^flagAuth != 0 {
		return challenge{}, fmt.Errorf("%w: unknown challenge flags %#x", ErrProtocol, p[0])
	}
	c := challenge{
		auth:       p[0]&flagAuth != 0,
		blockBytes: int(binary.BigEndian.Uint32(p[1:5])),
		maxKeys:    int(binary.BigEndian.Uint32(p[5:9])),
	}
	if c.maxKeys == 0 {
		return challenge{}, fmt.Errorf("%w: challenge allows no keys per fetch", ErrProtocol)
	}
	copy(c.nonce[:], p[9:9+nonceLen])
	copy(c.mac[:], p[9+nonceLen:])
	return c, nil
}

func appendBlockHead(b []byte, key, sum uint64, blockBytes int) []byte {
	b = appendHeader(b, msgBlock, blockHeadLen+blockBytes)
	b = binary.BigEndian.AppendUint64(b, key)
	return binary.BigEndian.AppendUint64(b, sum)
}

func appendMissing(b []byte, key uint64) []byte {
	return binary.BigEndian.AppendUint64(appendHeader(b, msgMissing, 8), key)
}

func appendError(b []byte, code uint16, text string) []byte {
	if len(text) > maxErrorText {
		text = text[:maxErrorText]
	}
	b = appendHeader(b, msgError, 2+len(text))
	b = binary.BigEndian.AppendUint16(b, code)
	return append(b, text...)
}

// PeerError is an ERROR frame a peer sent.
type PeerError struct {
	Code uint16
	Text string
}

func (e *PeerError) Error() string { return fmt.Sprintf("peer error %d: %s", e.Code, e.Text) }

// Unwrap maps the peer's code to our sentinel, so callers branch alike on
// local and remote failures.
func (e *PeerError) Unwrap() error {
	switch e.Code {
	case codeAuth:
		return ErrAuth
	case codeTooLarge:
		return ErrFrameTooLarge
	case codeBusy:
		return ErrPeerBusy
	}
	return ErrProtocol
}

func parseError(p []byte) (*PeerError, error) {
	if len(p) < 2 || len(p) > 2+maxErrorText {
		return nil, fmt.Errorf("%w: error frame of %d bytes", ErrProtocol, len(p))
	}
	return &PeerError{Code: binary.BigEndian.Uint16(p), Text: sanitize(p[2:])}, nil
}

// sanitize keeps a peer's text printable so it cannot forge log lines.
func sanitize(p []byte) string {
	b := make([]byte, 0, len(p))
	for _, c := range p {
		if c < 0x20 || c > 0x7e {
			c = '?'
		}
		b = append(b, c)
	}
	return string(b)
}
