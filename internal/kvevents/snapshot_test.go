package kvevents

import (
	"errors"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func TestSnapshotPayloadsRefused(t *testing.T) {
	enc := func(v any) []byte {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for name, p := range map[string][]byte{
		"not an array":         enc(map[string]int{"version": 1}),
		"six fields":           enc([]any{1, "e", 0, 1, 0, "b"}),
		"version 2":            enc([]any{2, "e", 0, 1, 0, "b", 0}),
		"epoch not a string":   enc([]any{1, 7, 0, 1, 0, "b", 0}),
		"negative count":       enc([]any{1, "e", 0, 1, 0, "b", -1}),
		"resume not after":     enc([]any{1, "e", 0, 5, 5, "b", 0}),
		"trailing bytes":       append(enc([]any{1, "e", 0, 1, 0, "b", 0}), 0),
		"truncated":            enc([]any{1, "e", 0, 1, 0, "b", 0})[:6],
		"epoch over 256 bytes": enc([]any{1, string(make([]byte, 257)), 0, 1, 0, "b", 0}),
	} {
		if _, err := DecodeSnapshotHeader(p); !errors.Is(err, ErrMalformed) {
			t.Errorf("header %s: err %v, want ErrMalformed", name, err)
		}
	}
	// Later fields are skipped: a newer header may add some.
	if h, err := DecodeSnapshotHeader(enc([]any{1, "e", 0, 1, 0, "b", 0, "new"})); err != nil || h.ResumeSeq != 1 {
		t.Errorf("header with an extra field: %+v, %v", h, err)
	}
	for name, p := range map[string][]byte{
		"record of one field": enc([]any{[]any{nil}}),
		"no hashes":           enc([]any{[]any{nil, []any{}}}),
		"hash a string":       enc([]any{[]any{nil, []any{"x"}}}),
		"count beyond bytes":  {0xdd, 0xff, 0xff, 0xff, 0xff},
		"trailing bytes":      append(enc([]any{[]any{nil, []any{1}}}), 0xc0),
	} {
		if _, err := DecodeSnapshotChunk(p, nil); !errors.Is(err, ErrMalformed) {
			t.Errorf("chunk %s: err %v, want ErrMalformed", name, err)
		}
	}
}
