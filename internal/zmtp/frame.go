// This file holds the frame reader: a peer's sizes believed only as far as limits and bytes received allow.

package zmtp

import (
	"encoding/binary"
	"fmt"
	"io"
)

// frameReader reads messages and commands from one connection.
type frameReader struct {
	r         io.Reader // buffered
	maxMsg    int64
	maxFrames int
	hdr       [8]byte
	// partial holds the frames of a message interrupted by a command, and
	// partialSize their bytes.
	partial     [][]byte
	partialSize int64
}

// next reads the next message or command. A command is returned alone
// (msg nil). Commands may come between the frames of a message: they are
// returned as they come and the message continues after them (libzmq
// may slip a heartbeat between frames).
func (fr *frameReader) next() (msg [][]byte, cmd *command, err error) {
	frames, used := fr.partial, fr.partialSize
	fr.partial, fr.partialSize = nil, 0
	for {
		flags, size, err := fr.header()
		if err != nil {
			return nil, nil, err
		}
		if flags&flagCommand != 0 {
			if flags&flagMore != 0 {
				return nil, nil, fmt.Errorf("%w: command frame with the MORE flag", ErrProtocol)
			}
			if size > maxCommand {
				return nil, nil, fmt.Errorf("%w: command frame announces %d bytes, limit %d", ErrTooLarge, size, maxCommand)
			}
			body, err := readBody(fr.r, int64(size))
			if err != nil {
				return nil, nil, err
			}
			c, err := parseCommand(body)
			if err != nil {
				return nil, nil, err
			}
			fr.partial, fr.partialSize = frames, used
			return nil, &c, nil
		}
		if len(frames) >= fr.maxFrames {
			return nil, nil, fmt.Errorf("%w: more than %d frames in a message (MaxFrames)", ErrTooLarge, fr.maxFrames)
		}
		// Compare before converting: size may be anything up to 2^64-1.
		if size > uint64(fr.maxMsg-used) {
			return nil, nil, fmt.Errorf("%w: frame announces %d bytes, %d left of the %d-byte limit (MaxMsgSize)", ErrTooLarge, size, fr.maxMsg-used, fr.maxMsg)
		}
		used += int64(size)
		body, err := readBody(fr.r, int64(size))
		if err != nil {
			return nil, nil, err
		}
		frames = append(frames, body)
		if flags&flagMore == 0 {
			return frames, nil, nil
		}
	}
}

// header reads a frame's flags and announced size.
func (fr *frameReader) header() (flags byte, size uint64, err error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:1]); err != nil {
		return 0, 0, err
	}
	flags = fr.hdr[0]
	if flags&flagReserved != 0 {
		return 0, 0, fmt.Errorf("%w: frame flags %#02x set reserved bits", ErrProtocol, flags)
	}
	if flags&flagLong == 0 {
		if _, err := io.ReadFull(fr.r, fr.hdr[:1]); err != nil {
			return 0, 0, unexpected(err)
		}
		return flags, uint64(fr.hdr[0]), nil
	}
	if _, err := io.ReadFull(fr.r, fr.hdr[:8]); err != nil {
		return 0, 0, unexpected(err)
	}
	return flags, binary.BigEndian.Uint64(fr.hdr[:8]), nil
}

// readBody reads n bytes into a buffer that grows as they arrive: its
// capacity stays within twice the bytes received plus readAhead, so a peer
// that announces a size pays for the memory with the bytes it sends.
func readBody(r io.Reader, n int64) ([]byte, error) {
	if n <= readAhead {
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, unexpected(err)
		}
		return b, nil
	}
	b := make([]byte, 0, readAhead)
	for int64(len(b)) < n {
		if len(b) == cap(b) {
			// Double what arrived, never past n.
			nb := make([]byte, len(b), min(n, 2*int64(len(b))))
			copy(nb, b)
			b = nb
		}
		end := min(int64(cap(b)), n)
		m, err := r.Read(b[len(b):end])
		b = b[:len(b)+m]
		if err != nil {
			if int64(len(b)) == n {
				break
			}
			return nil, unexpected(err)
		}
	}
	return b, nil
}

// unexpected turns an EOF inside a frame into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
