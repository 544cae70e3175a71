package zmtp

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// FuzzFrameReader feeds the frame reader whatever a peer could send after
// the handshake. It must never panic, never return a message over the
// limits, and never hand out more body bytes than it was given; it may only
// fail with an I/O error or an ErrProtocol. The seed corpus in
// testdata/fuzz holds the 2^62 and 64 GiB announcements.
func FuzzFrameReader(f *testing.F) {
	const maxMsg, maxFrames = 4096, 8
	f.Fuzz(func(t *testing.T, in []byte) {
		fr := frameReader{r: bytes.NewReader(in), maxMsg: maxMsg, maxFrames: maxFrames}
		got := 0
		for {
			msg, cmd, err := fr.next()
			if err != nil {
				if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.Is(err, ErrProtocol) {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if cmd != nil {
				if len(cmd.name) == 0 || len(cmd.data) > maxCommand {
					t.Fatalf("command %q with %d bytes", cmd.name, len(cmd.data))
				}
				got += len(cmd.name) + len(cmd.data)
				continue
			}
			if len(msg) == 0 || len(msg) > maxFrames {
				t.Fatalf("message of %d frames", len(msg))
			}
			size := 0
			for _, f := range msg {
				size += len(f)
			}
			if size > maxMsg {
				t.Fatalf("message of %d bytes, limit %d", size, maxMsg)
			}
			got += size
			if got > len(in) {
				t.Fatalf("%d body bytes out of %d input bytes", got, len(in))
			}
		}
	})
}

// FuzzHandshake feeds the greeting and READY parser whatever a stranger
// could send first. It must never panic and may only fail with an
// ErrHandshake (or another ErrProtocol); what it accepts must be a NULL
// 3.x peer of a type a SUB may talk to.
func FuzzHandshake(f *testing.F) {
	f.Fuzz(func(t *testing.T, in []byte) {
		info, err := readHandshake(bytes.NewReader(in), Sub)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error %v is no ErrProtocol", err)
			}
			return
		}
		if in[0] != sigFirst || in[9] != sigLast || info.major < 3 || info.mechanism != mechNull {
			t.Fatalf("accepted %+v from % x", info, in[:12])
		}
		if !strings.EqualFold(info.socketType, "PUB") && !strings.EqualFold(info.socketType, "XPUB") {
			t.Fatalf("accepted socket type %q", info.socketType)
		}
	})
}
