package kvencode

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"kvrouter/internal/kvevents"
)

func mustEncode(tb testing.TB, f Format, b kvevents.Batch) []byte {
	tb.Helper()
	e := Encoder{Format: f}
	out, err := e.Encode(b)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// The encoder reproduces the vectors of docs/wire.md §3.10 byte for byte
// from batches written out here, not from decoding them.
func TestEncodeWireVectors(t *testing.T) {
	tests := []struct {
		name   string
		format Format
		batch  kvevents.Batch
		want   string
	}{
		{"V1", VLLMMap, wantBatch(
			kvevents.Event{Kind: kvevents.KindStored, BlockHashes: []uint64{hashH}, TokenIDs: tokens1234, BlockSize: 4, SpecKind: "full_attention"},
			kvevents.Event{Kind: kvevents.KindRemoved, BlockHashes: []uint64{hashH}}), specV1},
		{"V3", SGLangMap, wantBatch(
			kvevents.Event{Kind: kvevents.KindStored, BlockHashes: []uint64{u(-3488128144981237669), 5674439469042975057},
				TokenIDs: []uint32{1, 2, 3, 4, 5, 6, 7, 8}, BlockSize: 4},
			kvevents.Event{Kind: kvevents.KindRemoved, BlockHashes: []uint64{5674439469042975057}}), specV3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := hex.EncodeToString(mustEncode(t, tc.format, tc.batch))
			if got != tc.want {
				t.Errorf("Encode =\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// roundTripBatches holds, per format, a batch using everything that format
// carries.
func roundTripBatches() map[Format]kvevents.Batch {
	many := make([]uint32, 40)
	manyHashes := make([]uint64, 20)
	for i := range many {
		many[i] = uint32(i) << 27
	}
	for i := range manyHashes {
		manyHashes[i] = uint64(i) << 59
	}
	common := []kvevents.Event{
		{Kind: kvevents.KindStored, BlockHashes: manyHashes, ParentHash: 1 << 63, HasParent: true, TokenIDs: many, BlockSize: 2,
			LoRAID: -7, HasLoRAID: true, Medium: "CPU_PINNED", Tier: kvevents.TierHost},
		{Kind: kvevents.KindStored, BlockHashes: []uint64{1}, BlockSize: 16, Placeholder: true, Medium: "CPU", Tier: kvevents.TierHost},
		{Kind: kvevents.KindRemoved, BlockHashes: []uint64{1, u(-1)}, Medium: "NVME", Tier: kvevents.TierDisk},
		{Kind: kvevents.KindRemoved, BlockHashes: []uint64{2}, Medium: "EXTERNAL", Tier: kvevents.TierExternal, Ownership: kvevents.OwnedByRunner},
		{Kind: kvevents.KindCleared},
	}
	with := func(extra ...kvevents.Event) []kvevents.Event {
		return append(append([]kvevents.Event(nil), common...), extra...)
	}
	return map[Format]kvevents.Batch{
		VLLMMap: {TS: 1.25, DPRank: 3, HasDPRank: true, Events: with(
			kvevents.Event{Kind: kvevents.KindStored, BlockHashes: []uint64{5}, TokenIDs: []uint32{9}, BlockSize: 1, Medium: "GPU",
				LoRAName: "adapter", GroupIdx: 2, SpecKind: "sliding_window", Locality: "LOCAL", Ownership: kvevents.OwnedByRunner, SessionID: "s1"},
			kvevents.Event{Kind: kvevents.KindRemoved, BlockHashes: []uint64{5}, Medium: "GPU", GroupIdx: 1, Locality: "REMOTE", Ownership: kvevents.OwnedByRunner},
			kvevents.Event{Kind: kvevents.KindCleared, Ownership: kvevents.OwnedByRunner},
			kvevents.Event{Kind: kvevents.KindStored, BlockHashes: []uint64{6, 7}, TokenIDs: []uint32{9, 8}, BlockSize: 1, Medium: "GPU",
				CacheSalt: "tenant-a", LoRAName: "adapter"})},
		VLLMArray: {TS: -3, Events: with(
			kvevents.Event{Kind: kvevents.KindStored, BlockHashes: []uint64{5}, TokenIDs: []uint32{9}, BlockSize: 1, Medium: "DEVICE",
				LoRAName: "adapter", GroupIdx: 2, SpecKind: "mamba"},
			kvevents.Event{Kind: kvevents.KindRemoved, BlockHashes: []uint64{5}, Medium: "SHARED", Tier: kvevents.TierExternal, GroupIdx: 1},
			kvevents.Event{Kind: kvevents.KindStored, BlockHashes: []uint64{6}, TokenIDs: []uint32{9}, BlockSize: 1, Medium: "GPU", CacheSalt: "tenant-a"})},
		SGLangMap: {TS: 7, DPRank: 1, HasDPRank: true, Events: with(
			kvevents.Event{Kind: kvevents.KindStored, BlockHashes: []uint64{u(-5)}, TokenIDs: []uint32{9, 8}, BlockSize: 2, Medium: "GPU",
				CacheSalt: "tenant-a", SessionID: "s1", LoRAName: "adapter"})},
		SGLangArray: {TS: 7, HasDPRank: true, Events: with(
			kvevents.Event{Kind: kvevents.KindStored, BlockHashes: []uint64{u(-5)}, TokenIDs: []uint32{9, 8}, BlockSize: 2, Medium: "GPU",
				CacheSalt: "tenant-a"})},
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	for format, b := range roundTripBatches() {
		for _, env := range []Envelope{EnvelopeArray, EnvelopeLegacy, EnvelopeMap} {
			t.Run(format.String()+"/"+[]string{"array", "legacy", "map"}[env], func(t *testing.T) {
				e := Encoder{Format: format, Envelope: env}
				payload, err := e.Encode(b)
				if err != nil {
					t.Fatal(err)
				}
				var d kvevents.Decoder
				got, err := d.Decode(payload)
				if err != nil {
					t.Fatal(err)
				}
				want := b
				if env == EnvelopeLegacy {
					want.DPRank, want.HasDPRank = 0, false
				}
				if format == VLLMMap || format == VLLMArray {
					// vLLM forms carry extra_keys on every store, even
					// all nil: a decoded store says it had them.
					want.Events = slices.Clone(want.Events)
					for i := range want.Events {
						want.Events[i].ExtraKeys = want.Events[i].Kind == kvevents.KindStored
					}
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("decode(encode(b)) =\n%+v\nwant\n%+v", got, want)
				}
				if st := d.Stats(); st.UnknownKeys != 0 || st.UnknownTags != 0 {
					t.Errorf("encoder wrote something the decoder did not know: %+v", st)
				}
			})
		}
	}
}

func TestEncodeMediums(t *testing.T) {
	ev := kvevents.Event{Kind: kvevents.KindRemoved, BlockHashes: []uint64{1}, Tier: kvevents.TierHost}
	b := kvevents.Batch{Events: []kvevents.Event{ev}}
	tests := []struct {
		name    string
		mediums map[kvevents.Tier]string
		medium  string
		want    string
	}{
		{"default", nil, "", "CPU"},
		{"override", map[kvevents.Tier]string{kvevents.TierHost: "CPU_TIER1"}, "", "CPU_TIER1"},
		{"event wins", map[kvevents.Tier]string{kvevents.TierHost: "CPU_TIER1"}, "CPU_PINNED", "CPU_PINNED"},
	}
	for _, tc := range tests {
		b.Events[0].Medium = tc.medium
		e := Encoder{Format: VLLMArray, Mediums: tc.mediums}
		payload, err := e.Encode(b)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !bytes.Contains(payload, appendStr(nil, tc.want)) {
			t.Errorf("%s: payload %x lacks medium %q", tc.name, payload, tc.want)
		}
	}
}

func TestEncodeRefuses(t *testing.T) {
	stored := kvevents.Event{Kind: kvevents.KindStored, BlockHashes: []uint64{1}, TokenIDs: tokens1234, BlockSize: 4}
	edit := func(e kvevents.Event, f func(*kvevents.Event)) kvevents.Event { f(&e); return e }
	tests := []struct {
		name   string
		format Format
		ev     kvevents.Event
	}{
		{"ownership in vLLM array", VLLMArray, edit(stored, func(e *kvevents.Event) { e.Ownership = kvevents.OwnedByRunner })},
		{"ownership in SGLang map", SGLangMap, edit(stored, func(e *kvevents.Event) { e.Ownership = kvevents.OwnedByRunner })},
		{"runner-owned cleared in SGLang", SGLangArray, kvevents.Event{Kind: kvevents.KindCleared, Ownership: kvevents.OwnedByRunner}},
		{"worker-owned EXTERNAL", VLLMMap, edit(stored, func(e *kvevents.Event) { e.Tier = kvevents.TierExternal })},
		{"medium of another tier", VLLMMap, edit(stored, func(e *kvevents.Event) { e.Medium = "CPU" })},
		{"unknown medium", VLLMMap, edit(stored, func(e *kvevents.Event) { e.Medium = "TAPE" })},
		{"locality in array", VLLMArray, edit(stored, func(e *kvevents.Event) { e.Locality = "LOCAL" })},
		{"locality in SGLang", SGLangMap, edit(stored, func(e *kvevents.Event) { e.Locality = "LOCAL" })},
		{"session in vLLM array", VLLMArray, edit(stored, func(e *kvevents.Event) { e.SessionID = "s" })},
		{"group in SGLang", SGLangMap, edit(stored, func(e *kvevents.Event) { e.GroupIdx = 1 })},
		{"spec kind in SGLang", SGLangArray, edit(stored, func(e *kvevents.Event) { e.SpecKind = "mamba" })},
		{"lora name in SGLang array", SGLangArray, edit(stored, func(e *kvevents.Event) { e.LoRAName = "l" })},
		{"cache salt in vLLM under a parent", VLLMMap, edit(stored, func(e *kvevents.Event) { e.CacheSalt, e.HasParent, e.ParentHash = "s", true, 9 })},
		{"extra-keys digest in vLLM", VLLMArray, edit(stored, func(e *kvevents.Event) { e.BlockExtra = []uint64{7} })},
		{"extra-keys digest in SGLang", SGLangMap, edit(stored, func(e *kvevents.Event) { e.BlockExtra = []uint64{7} })},
		{"token count", VLLMMap, edit(stored, func(e *kvevents.Event) { e.BlockSize = 3 })},
		{"placeholder with tokens", VLLMMap, edit(stored, func(e *kvevents.Event) { e.Placeholder = true })},
		{"empty tokens not marked placeholder", VLLMMap, edit(stored, func(e *kvevents.Event) { e.TokenIDs = nil })},
		{"negative block size", VLLMMap, edit(stored, func(e *kvevents.Event) { e.BlockSize = -1 })},
		{"unknown kind", VLLMMap, kvevents.Event{Kind: 9}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := Encoder{Format: tc.format}
			dst := []byte("keep")
			out, err := e.Append(dst, kvevents.Batch{Events: []kvevents.Event{tc.ev}})
			if !errors.Is(err, ErrUnencodable) {
				t.Fatalf("error %v, want ErrUnencodable", err)
			}
			if string(out) != "keep" {
				t.Errorf("dst changed on error: %q", out)
			}
		})
	}
	if _, err := (&Encoder{Format: 9}).Encode(kvevents.Batch{}); !errors.Is(err, ErrUnencodable) {
		t.Errorf("unknown format: error %v", err)
	}
}

func TestAppendIntForms(t *testing.T) {
	// msgpack-python's choices, which the spec vectors depend on.
	tests := []struct {
		v    int64
		want string
	}{
		{0, "00"}, {127, "7f"}, {128, "cc80"}, {255, "ccff"}, {256, "cd0100"}, {65536, "ce00010000"},
		{1 << 32, "cf0000000100000000"}, {-1, "ff"}, {-32, "e0"}, {-33, "d0df"}, {-128, "d080"},
		{-129, "d1ff7f"}, {-32769, "d2ffff7fff"}, {-1 << 31, "d280000000"}, {-1<<31 - 1, "d3ffffffff7fffffff"},
	}
	for _, tc := range tests {
		if got := hex.EncodeToString(appendInt(nil, tc.v)); got != tc.want {
			t.Errorf("appendInt(%d) = %s, want %s", tc.v, got, tc.want)
		}
	}
	for _, n := range []int{0, 15, 16, 31, 32, 255, 256, 65535, 65536} {
		var got string
		err := msgpack.Unmarshal(appendStr(nil, string(make([]byte, n))), &got)
		if err != nil || len(got) != n {
			t.Errorf("string of %d bytes read back as %d (%v)", n, len(got), err)
		}
	}
}

// TestEncodeLoRAExtraKeys: vLLM hashes an adapter's name with every block
// of its requests, and the salt with a salted root block only, and says so
// in extra_keys.
func TestEncodeLoRAExtraKeys(t *testing.T) {
	for _, tc := range []struct {
		ev   kvevents.Event
		want []any
	}{
		{kvevents.Event{HasParent: true, ParentHash: 4, LoRAName: "sql"}, []any{[]any{"sql"}, []any{"sql"}}},
		{kvevents.Event{LoRAName: "sql", CacheSalt: "tenant-a"}, []any{[]any{"sql", "tenant-a"}, []any{"sql"}}},
		{kvevents.Event{CacheSalt: "tenant-a"}, []any{[]any{"tenant-a"}, nil}},
		{kvevents.Event{}, []any{nil, nil}},
	} {
		ev := tc.ev
		ev.Kind, ev.BlockHashes, ev.TokenIDs, ev.BlockSize, ev.Medium = kvevents.KindStored, []uint64{5, 6}, []uint32{1, 2}, 1, "GPU"
		payload := mustEncode(t, VLLMMap, kvevents.Batch{Events: []kvevents.Event{ev}})
		var raw []any
		if err := msgpack.Unmarshal(payload, &raw); err != nil {
			t.Fatal(err)
		}
		stored := raw[1].([]any)[0].(map[string]any)
		if got := stored[kvevents.KeyExtraKeys]; !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%+v: extra_keys %#v, want %#v", tc.ev, got, tc.want)
		}
		var d kvevents.Decoder
		b, err := d.Decode(payload)
		if err != nil || b.Events[0].LoRAName != tc.ev.LoRAName || b.Events[0].CacheSalt != tc.ev.CacheSalt || b.Events[0].BlockExtra != nil {
			t.Errorf("%+v: decoded %+v, %v", tc.ev, b.Events, err)
		}
	}
}
