// This file holds Frame, one engine message, and the capture files that store frames as lines.

package kvevents

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ErrBadFrame: a capture line is not `<topic> <seq 16 hex> <payload hex>`.
var ErrBadFrame = errors.New("bad capture line")

// Frame is one engine message: the three ZMQ frames of docs/wire.md §2.3.
type Frame struct {
	Topic   string
	Seq     uint64
	Payload []byte
}

// A Source yields frames until it returns io.EOF. Capture files, a single
// payload and a live ZMQ subscription are all sources.
type Source interface {
	Next() (Frame, error)
}

// maxLine bounds a capture line: a payload at DefaultMaxPayload in hex plus
// topic and seq.
const maxLine = 2*DefaultMaxPayload + 4096

// FrameReader reads a capture file: one message a line, as ParseFrame reads
// it. Blank lines and lines starting with '#' are skipped.
type FrameReader struct {
	sc   *bufio.Scanner
	line int
}

var _ Source = (*FrameReader)(nil)

// NewFrameReader reads frames from r.
func NewFrameReader(r io.Reader) *FrameReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	return &FrameReader{sc: sc}
}

// Next returns the next frame, or io.EOF after the last.
func (fr *FrameReader) Next() (Frame, error) {
	for fr.sc.Scan() {
		fr.line++
		line := strings.TrimSuffix(fr.sc.Text(), "\r")
		if line == "" || line[0] == '#' {
			continue
		}
		f, err := ParseFrame(line)
		if err != nil {
			return Frame{}, fmt.Errorf("line %d: %w", fr.line, err)
		}
		return f, nil
	}
	if err := fr.sc.Err(); err != nil {
		return Frame{}, fmt.Errorf("line %d: %w", fr.line+1, err)
	}
	return Frame{}, io.EOF
}

// Line is the number of the line Next last read.
func (fr *FrameReader) Line() int { return fr.line }

// ReadFrames reads a whole capture file.
func ReadFrames(r io.Reader) ([]Frame, error) {
	fr := NewFrameReader(r)
	var out []Frame
	for {
		f, err := fr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, f)
	}
}

// ParseFrame parses one capture line. The line is split from the right, as
// the topic may be empty (a line then starts with a space) and an empty
// payload (a replay end marker) leaves the line ending in a space.
func ParseFrame(line string) (Frame, error) {
	i := strings.LastIndexByte(line, ' ')
	if i < 0 {
		return Frame{}, fmt.Errorf("%w: want <topic> <seq> <payload hex>", ErrBadFrame)
	}
	j := strings.LastIndexByte(line[:i], ' ')
	if j < 0 {
		return Frame{}, fmt.Errorf("%w: want <topic> <seq> <payload hex>", ErrBadFrame)
	}
	seqHex := line[j+1 : i]
	if len(seqHex) != 16 {
		return Frame{}, fmt.Errorf("%w: seq %q is not 16 hex digits", ErrBadFrame, seqHex)
	}
	seq, err := strconv.ParseUint(seqHex, 16, 64)
	if err != nil {
		return Frame{}, fmt.Errorf("%w: seq %q is not 16 hex digits", ErrBadFrame, seqHex)
	}
	payload, err := hex.DecodeString(line[i+1:])
	if err != nil {
		return Frame{}, fmt.Errorf("%w: payload: %w", ErrBadFrame, err)
	}
	return Frame{Topic: line[:j], Seq: seq, Payload: payload}, nil
}

// AppendFrame writes f as a capture line, newline included.
func AppendFrame(dst []byte, f Frame) []byte {
	dst = append(dst, f.Topic...)
	dst = append(dst, ' ')
	dst = fmt.Appendf(dst, "%016x ", f.Seq)
	dst = hex.AppendEncode(dst, f.Payload)
	return append(dst, '\n')
}
