package zmtp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// greetingWith is our greeting with some bytes changed.
func greetingWith(edit func(g []byte)) []byte {
	g := appendGreeting(nil)
	edit(g)
	return g
}

func TestParseGreeting(t *testing.T) {
	tests := []struct {
		name   string
		in     []byte
		ok     bool
		speaks bool // 3.1
	}{
		{"ours", appendGreeting(nil), true, true},
		{"3.0", greetingWith(func(g []byte) { g[11] = 0 }), true, false},
		{"4.0 (later versions are accepted)", greetingWith(func(g []byte) { g[10], g[11] = 4, 0 }), true, true},
		{"libzmq padding", greetingWith(func(g []byte) { g[8] = 1 }), true, true},
		{"as-server and filler ignored", greetingWith(func(g []byte) { g[32], g[40] = 1, 9 }), true, true},
		{"2.0", greetingWith(func(g []byte) { g[10] = 2 }), false, false},
		{"1.0 signature", greetingWith(func(g []byte) { g[9] = 0 }), false, false},
		{"bad first byte", greetingWith(func(g []byte) { g[0] = 0 }), false, false},
		{"PLAIN", greetingWith(func(g []byte) { copy(g[12:], "PLAIN") }), false, false},
		{"CURVE", greetingWith(func(g []byte) { copy(g[12:], "CURVE") }), false, false},
		{"NULL with garbage", greetingWith(func(g []byte) { g[20] = 'x' }), false, false},
		{"NULLX", greetingWith(func(g []byte) { g[16] = 'X' }), false, false},
		{"short", appendGreeting(nil)[:63], false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, err := parseGreeting(tc.in)
			if tc.ok != (err == nil) {
				t.Fatalf("err %v, want ok %v", err, tc.ok)
			}
			if err != nil {
				if !errors.Is(err, ErrHandshake) {
					t.Fatalf("err %v does not wrap ErrHandshake", err)
				}
				return
			}
			if g.speaks31() != tc.speaks {
				t.Fatalf("speaks31 %v, want %v", g.speaks31(), tc.speaks)
			}
		})
	}
}

func TestAppendFrameHeader(t *testing.T) {
	tests := []struct {
		flags byte
		n     int
		want  []byte
	}{
		{0, 0, []byte{0, 0}},
		{flagMore, 255, []byte{1, 255}},
		{0, 256, []byte{2, 0, 0, 0, 0, 0, 0, 1, 0}},
		{flagMore | flagCommand, 1 << 20, []byte{7, 0, 0, 0, 0, 0, 0x10, 0, 0}},
	}
	for _, tc := range tests {
		if got := appendFrameHeader(nil, tc.flags, tc.n); !bytes.Equal(got, tc.want) {
			t.Errorf("flags %#x size %d: % x, want % x", tc.flags, tc.n, got, tc.want)
		}
	}
}

func TestParseProperties(t *testing.T) {
	good := appendProperty(appendProperty(nil, "Socket-Type", []byte("PUB")), "X-Other", []byte("v"))
	props, err := parseProperties(good)
	if err != nil || string(props["socket-type"]) != "PUB" || string(props["x-other"]) != "v" {
		t.Fatalf("props %q, err %v", props, err)
	}
	huge := append([]byte{4}, "Name"...)
	huge = binary.BigEndian.AppendUint32(huge, 0xFFFFFFFF)
	for name, in := range map[string][]byte{
		"value past the end": huge,
		"name past the end":  {9, 'a'},
		"empty name":         {0, 0, 0, 0, 0},
		"no value size":      {1, 'a', 0},
	} {
		if _, err := parseProperties(in); !errors.Is(err, ErrHandshake) {
			t.Errorf("%s: err %v, want ErrHandshake", name, err)
		}
	}
}
