package zmtp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"testing"
)

// frame builds one frame on the wire.
func frame(flags byte, body string) []byte {
	return append(appendFrameHeader(nil, flags, len(body)), body...)
}

// longHeader announces n bytes in a long frame header.
func longHeader(flags byte, n uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{flags | flagLong}, n)
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// readAll reads what a frameReader makes of in: messages as "a|b|c",
// commands as "!NAME:data", then the error.
func readAll(in []byte, maxMsg int64, maxFrames int) (got []string, err error) {
	fr := frameReader{r: bytes.NewReader(in), maxMsg: maxMsg, maxFrames: maxFrames}
	for {
		msg, cmd, err := fr.next()
		if err != nil {
			return got, err
		}
		if cmd != nil {
			got = append(got, fmt.Sprintf("!%s:%s", cmd.name, cmd.data))
			continue
		}
		got = append(got, string(bytes.Join(msg, []byte("|"))))
	}
}

func TestFrameReader(t *testing.T) {
	long := string(bytes.Repeat([]byte("x"), 300))
	tests := []struct {
		name string
		in   []byte
		max  int64
		want []string
		err  error // besides io.EOF at the end
	}{
		{name: "one frame", in: frame(0, "hello"), want: []string{"hello"}},
		{name: "empty frame", in: frame(0, ""), want: []string{""}},
		{name: "multipart", in: cat(frame(flagMore, "kv"), frame(flagMore, "12345678"), frame(0, "p")), want: []string{"kv|12345678|p"}},
		{name: "long frame", in: frame(0, long), want: []string{long}},
		{name: "long encoding of a short frame", in: cat(longHeader(0, 2), []byte("ab")), want: []string{"ab"}},
		{name: "command", in: appendCommand(nil, "PING", []byte{0, 1}), want: []string{"!PING:\x00\x01"}},
		{name: "command between frames", in: cat(frame(flagMore, "a"), appendCommand(nil, "PING", []byte{0, 1}), frame(0, "b")), want: []string{"!PING:\x00\x01", "a|b"}},
		{name: "at the size limit", in: cat(frame(flagMore, "abc"), frame(0, "de")), max: 5, want: []string{"abc|de"}},
		{name: "over the limit across frames", in: cat(frame(flagMore, "abc"), frame(0, "def")), max: 5, err: ErrTooLarge},
		{name: "2^62 announced", in: longHeader(0, 1<<62), err: ErrTooLarge},
		{name: "2^64-1 announced", in: longHeader(0, math.MaxUint64), err: ErrTooLarge},
		{name: "64 GiB announced", in: longHeader(flagMore, 64<<30), err: ErrTooLarge},
		{name: "command of 2^62", in: longHeader(flagCommand, 1<<62), err: ErrTooLarge},
		{name: "command over 64 KiB", in: longHeader(flagCommand, maxCommand+1), err: ErrTooLarge},
		{name: "too many frames", in: bytes.Repeat(frame(flagMore, ""), 5), err: ErrTooLarge},
		{name: "reserved bits", in: frame(0x08, "x"), err: ErrProtocol},
		{name: "command with MORE", in: frame(flagCommand|flagMore, "\x04PING"), err: ErrProtocol},
		{name: "empty command", in: frame(flagCommand, ""), err: ErrProtocol},
		{name: "command name past its body", in: frame(flagCommand, "\x09PING"), err: ErrProtocol},
		{name: "truncated header", in: []byte{flagLong, 0, 0}, err: io.ErrUnexpectedEOF},
		{name: "truncated body", in: cat(longHeader(0, 100000), []byte("abc")), err: io.ErrUnexpectedEOF},
		{name: "truncated short body", in: []byte{0, 5, 'a'}, err: io.ErrUnexpectedEOF},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			max := tc.max
			if max == 0 {
				max = 1 << 20
			}
			got, err := readAll(tc.in, max, 4)
			want := tc.err
			if want == nil {
				want = io.EOF
			}
			if !errors.Is(err, want) {
				t.Fatalf("err %v, want %v", err, want)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// tricklingReader hands out at most step bytes per Read and records how
// far the buffers it was offered ran ahead of twice what it had delivered.
type tricklingReader struct {
	data      []byte
	step      int
	delivered int
	ahead     int // max over Reads of delivered + len(p) - 2*delivered
}

func (r *tricklingReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	// The body so far is delivered bytes long and p follows it: the buffer
	// holds at least delivered + len(p).
	r.ahead = max(r.ahead, len(p)-r.delivered)
	n := copy(p, r.data[:min(len(r.data), r.step)])
	r.data = r.data[n:]
	r.delivered += n
	return n, nil
}

// TestReadBodyGrowsWithBytes checks that a body buffer never holds more
// than twice the bytes that arrived plus readAhead.
func TestReadBodyGrowsWithBytes(t *testing.T) {
	const n = 4 << 20
	r := &tricklingReader{data: bytes.Repeat([]byte{7}, n), step: 1000}
	b, err := readBody(r, n)
	if err != nil || len(b) != n {
		t.Fatalf("read %d bytes, err %v", len(b), err)
	}
	if r.ahead > readAhead {
		t.Fatalf("a Read was offered %d bytes beyond those received, limit %d", r.ahead, readAhead)
	}
	if cap(b) != n {
		t.Fatalf("cap %d for %d bytes", cap(b), n)
	}
	// A peer that announces much and sends little costs what it sent.
	r = &tricklingReader{data: bytes.Repeat([]byte{7}, 100<<10), step: 4096}
	if _, err := readBody(r, 1<<30); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err %v, want io.ErrUnexpectedEOF", err)
	}
	if r.ahead > readAhead {
		t.Fatalf("a buffer ran %d bytes past twice those received, limit %d", r.ahead, readAhead)
	}
}

func BenchmarkFrameReader(b *testing.B) {
	msg := cat(frame(flagMore, "kv@10.0.0.1:8000@model"), frame(flagMore, "12345678"), frame(0, string(make([]byte, 256))))
	in := bytes.Repeat(msg, 1000)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for range b.N {
		fr := frameReader{r: bytes.NewReader(in), maxMsg: DefaultMaxMsgSize, maxFrames: DefaultMaxFrames}
		for {
			if _, _, err := fr.next(); err != nil {
				break
			}
		}
	}
}
