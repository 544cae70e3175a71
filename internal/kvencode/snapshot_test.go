package kvencode

import (
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"kvrouter/internal/kvevents"
)

// The snapshot payloads read back as written, and as msgpack writes the
// same values (SGLang's msgspec writes array_like structs as arrays).
func TestSnapshotRoundTrip(t *testing.T) {
	h := kvevents.SnapshotHeader{Version: 1, Epoch: "0123456789abcdef0123456789abcdef", ReplicaRank: 2,
		ResumeSeq: 301, BarrierSeq: 300, BarrierID: "fedcba9876543210fedcba9876543210", RecordCount: 3}
	got, err := kvevents.DecodeSnapshotHeader(AppendSnapshotHeader(nil, h))
	if err != nil || got != h {
		t.Fatalf("header: got %+v, %v; want %+v", got, err, h)
	}
	ref, err := msgpack.Marshal([]any{1, h.Epoch, 2, 301, 300, h.BarrierID, 3})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := kvevents.DecodeSnapshotHeader(ref); err != nil || got != h {
		t.Fatalf("header from msgpack: got %+v, %v", got, err)
	}

	// SGLang's page hashes are signed: -3488128144981237669 is §3.10's.
	neg := uint64(0xcf97adeedb59e05b)
	blocks := []kvevents.SnapshotBlock{
		{Hashes: []uint64{neg}},
		{Parent: neg, HasParent: true, Hashes: []uint64{5674439469042975057}},
		{Parent: 5674439469042975057, HasParent: true, Hashes: []uint64{7, 8}},
	}
	back, err := kvevents.DecodeSnapshotChunk(AppendSnapshotChunk(nil, blocks), nil)
	if err != nil || !reflect.DeepEqual(back, blocks) {
		t.Fatalf("chunk: got %+v, %v; want %+v", back, err, blocks)
	}
	ref, err = msgpack.Marshal([]any{
		[]any{nil, []any{int64(neg)}},
		[]any{int64(neg), []any{int64(5674439469042975057)}},
		[]any{int64(5674439469042975057), []any{7, 8}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if back, err := kvevents.DecodeSnapshotChunk(ref, nil); err != nil || !reflect.DeepEqual(back, blocks) {
		t.Fatalf("chunk from msgpack: got %+v, %v", back, err)
	}
}
