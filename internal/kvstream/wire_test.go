package kvstream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
)

func TestParseMessage(t *testing.T) {
	seq5 := []byte{0, 0, 0, 0, 0, 0, 0, 5}
	tests := []struct {
		name   string
		frames [][]byte
		want   string // "topic seq payload", or "" for malformed
	}{
		{"valid", [][]byte{[]byte("kv@h:1@m"), seq5, []byte("pl")}, "kv@h:1@m 5 pl"},
		{"empty topic and payload", [][]byte{{}, seq5, {}}, " 5 "},
		{"big endian", [][]byte{{}, {1, 2, 3, 4, 5, 6, 7, 8}, {}}, " 72623859790382856 "},
		{"two frames", [][]byte{{}, seq5}, ""},
		{"four frames", [][]byte{{}, seq5, {}, {}}, ""},
		{"no frames", nil, ""},
		{"short seq", [][]byte{{}, {5}, {}}, ""},
		{"long seq", [][]byte{{}, append(seq5, 0), {}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			topic, seq, payload, err := ParseMessage(tc.frames)
			if tc.want == "" {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("error %v, want ErrMalformed", err)
				}
				return
			}
			if got := fmt.Sprintf("%s %d %s", topic, seq, payload); err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestParseReplayRequest(t *testing.T) {
	tests := []struct {
		name   string
		frames [][]byte
		want   uint64
		ok     bool
	}{
		{"valid", [][]byte{{}, {0, 0, 0, 0, 0, 0, 1, 0}}, 256, true},
		{"encoded", EncodeReplayRequest(1<<63 + 7), 1<<63 + 7, true},
		{"delimiter not empty", [][]byte{{0}, {0, 0, 0, 0, 0, 0, 1, 0}}, 0, false},
		{"no delimiter", [][]byte{{0, 0, 0, 0, 0, 0, 1, 0}}, 0, false},
		{"short seq", [][]byte{{}, {1}}, 0, false},
		{"extra frame", [][]byte{{}, {0, 0, 0, 0, 0, 0, 1, 0}, {}}, 0, false},
		{"nothing", nil, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseReplayRequest(tc.frames)
			if !tc.ok {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("error %v, want ErrMalformed", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

func seq8(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// TestParseReplayReply: every framing of a replay reply seen in the wild
// reads the same.
func TestParseReplayReply(t *testing.T) {
	tests := []struct {
		name   string
		frames [][]byte
		want   string // "seq payload" or "end", "" for malformed
	}{
		// vLLM's framing (SPEC 2.1), ours.
		{"batch", EncodeReplayReply(42, []byte("pl")), "42 pl"},
		{"empty payload", EncodeReplayReply(0, nil), "0 "},
		{"end marker", EncodeReplayEnd(), "end"},
		{"end marker literal", [][]byte{{}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, {}}, "end"},
		// A topic in place of the delimiter.
		{"topic", [][]byte{[]byte("kv@h:1@m"), seq8(42), []byte("pl")}, "42 pl"},
		{"topic end marker", [][]byte{[]byte("kv"), seq8(endSeq), {}}, "end"},
		// The delimiter, then a topic.
		{"delimiter and topic", [][]byte{{}, []byte("kv"), seq8(42), []byte("pl")}, "42 pl"},
		{"delimiter and empty topic", [][]byte{{}, {}, seq8(7), []byte("pl")}, "7 pl"},
		{"delimiter and topic end marker", [][]byte{{}, []byte("kv"), seq8(endSeq), {}}, "end"},
		// Malformed.
		{"delimiter not empty before a topic", [][]byte{{1}, []byte("kv"), seq8(1), {}}, ""},
		{"short seq", [][]byte{{}, make([]byte, 7), {}}, ""},
		{"short seq after a topic", [][]byte{{}, []byte("kv"), make([]byte, 9), {}}, ""},
		{"two frames", [][]byte{{}, make([]byte, 8)}, ""},
		{"five frames", [][]byte{{}, []byte("kv"), seq8(1), {}, {}}, ""},
		{"no frames", nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seq, payload, end, err := ParseReplayReply(tc.frames)
			if tc.want == "" {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("error %v, want ErrMalformed", err)
				}
				return
			}
			got := fmt.Sprintf("%d %s", seq, payload)
			if end {
				got = "end"
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestTopicKey(t *testing.T) {
	tests := []struct{ topic, want string }{
		{"", ""},
		{"kv@h:1@m", "kv@h:1@m"},
		{"kv@h:1@m\x00sgl-kv-epoch=7", "kv@h:1@m"},
		{"\x00sgl-kv-epoch=7", ""},
		{"kv\x00other", "kv\x00other"},
	}
	for _, tc := range tests {
		if got := TopicKey(tc.topic); got != tc.want {
			t.Errorf("TopicKey(%q) = %q, want %q", tc.topic, got, tc.want)
		}
	}
}

func TestPublisherKey(t *testing.T) {
	tests := []struct{ topic, want string }{
		{"", ""},
		{"kv@h:1@m", "kv@h:1@m"},
		{"kv@h:1@m\x00sgl-kv-epoch=7", "kv@h:1@m"},
		{"kv@h:1@m|kvcr-tp1", "kv@h:1@m"},
		{"kv@h:1@m|kvcr-tp12", "kv@h:1@m"},
		// The engine's topic, epoch suffix included, then the shard.
		{"kv@h:1@m\x00sgl-kv-epoch=7|kvcr-tp1", "kv@h:1@m"},
		{"|kvcr-tp0", ""},
		// Not a shard suffix: the topic is the engine's own.
		{"kv@h:1@m|kvcr-tp", "kv@h:1@m|kvcr-tp"},
		{"kv@h:1@m|kvcr-tpx", "kv@h:1@m|kvcr-tpx"},
	}
	for _, tc := range tests {
		if got := PublisherKey(tc.topic); got != tc.want {
			t.Errorf("PublisherKey(%q) = %q, want %q", tc.topic, got, tc.want)
		}
	}
}

func TestTopicEpoch(t *testing.T) {
	tests := []struct{ topic, want string }{
		{"", ""},
		{"kv@h:1@m", ""},
		{"kv@h:1@m\x00sgl-kv-epoch=7", "\x00sgl-kv-epoch=7"},
		{"kv@h:1@m|kvcr-tp1", ""},
		// The shard suffix follows the epoch and is not part of it.
		{"kv@h:1@m\x00sgl-kv-epoch=7|kvcr-tp1", "\x00sgl-kv-epoch=7"},
	}
	for _, tc := range tests {
		if got := TopicEpoch(tc.topic); got != tc.want {
			t.Errorf("TopicEpoch(%q) = %q, want %q", tc.topic, got, tc.want)
		}
	}
}
