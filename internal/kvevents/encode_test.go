package kvevents

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func mustEncode(tb testing.TB, f Format, b Batch) []byte {
	tb.Helper()
	e := Encoder{Format: f}
	out, err := e.Encode(b)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// The encoder reproduces SPEC 2.4's vectors byte for byte from batches
// written out here, not from decoding them.
func TestEncodeSpecVectors(t *testing.T) {
	tests := []struct {
		name   string
		format Format
		batch  Batch
		want   string
	}{
		{"V1", VLLMMap, wantBatch(
			Event{Kind: KindStored, BlockHashes: []uint64{hashH}, TokenIDs: tokens1234, BlockSize: 4, SpecKind: "full_attention"},
			Event{Kind: KindRemoved, BlockHashes: []uint64{hashH}}), specV1},
		{"V3", SGLangMap, wantBatch(
			Event{Kind: KindStored, BlockHashes: []uint64{u(-3488128144981237669), 5674439469042975057},
				TokenIDs: []uint32{1, 2, 3, 4, 5, 6, 7, 8}, BlockSize: 4},
			Event{Kind: KindRemoved, BlockHashes: []uint64{5674439469042975057}}), specV3},
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
func roundTripBatches() map[Format]Batch {
	many := make([]uint32, 40)
	manyHashes := make([]uint64, 20)
	for i := range many {
		many[i] = uint32(i) << 27
	}
	for i := range manyHashes {
		manyHashes[i] = uint64(i) << 59
	}
	common := []Event{
		{Kind: KindStored, BlockHashes: manyHashes, ParentHash: 1 << 63, HasParent: true, TokenIDs: many, BlockSize: 2,
			LoRAID: -7, HasLoRAID: true, Medium: "CPU_PINNED", Tier: TierHost},
		{Kind: KindStored, BlockHashes: []uint64{1}, BlockSize: 16, Placeholder: true, Medium: "CPU", Tier: TierHost},
		{Kind: KindRemoved, BlockHashes: []uint64{1, u(-1)}, Medium: "NVME", Tier: TierDisk},
		{Kind: KindRemoved, BlockHashes: []uint64{2}, Medium: "EXTERNAL", Tier: TierExternal, Ownership: OwnedByRunner},
		{Kind: KindCleared},
	}
	with := func(extra ...Event) []Event { return append(append([]Event(nil), common...), extra...) }
	return map[Format]Batch{
		VLLMMap: {TS: 1.25, DPRank: 3, HasDPRank: true, Events: with(
			Event{Kind: KindStored, BlockHashes: []uint64{5}, TokenIDs: []uint32{9}, BlockSize: 1, Medium: "GPU",
				LoRAName: "adapter", GroupIdx: 2, SpecKind: "sliding_window", Locality: "LOCAL", Ownership: OwnedByRunner, SessionID: "s1"},
			Event{Kind: KindRemoved, BlockHashes: []uint64{5}, Medium: "GPU", GroupIdx: 1, Locality: "REMOTE", Ownership: OwnedByRunner},
			Event{Kind: KindCleared, Ownership: OwnedByRunner},
			Event{Kind: KindStored, BlockHashes: []uint64{6, 7}, TokenIDs: []uint32{9, 8}, BlockSize: 1, Medium: "GPU",
				CacheSalt: "tenant-a", LoRAName: "adapter"})},
		VLLMArray: {TS: -3, Events: with(
			Event{Kind: KindStored, BlockHashes: []uint64{5}, TokenIDs: []uint32{9}, BlockSize: 1, Medium: "DEVICE",
				LoRAName: "adapter", GroupIdx: 2, SpecKind: "mamba"},
			Event{Kind: KindRemoved, BlockHashes: []uint64{5}, Medium: "SHARED", Tier: TierExternal, GroupIdx: 1},
			Event{Kind: KindStored, BlockHashes: []uint64{6}, TokenIDs: []uint32{9}, BlockSize: 1, Medium: "GPU", CacheSalt: "tenant-a"})},
		SGLangMap: {TS: 7, DPRank: 1, HasDPRank: true, Events: with(
			Event{Kind: KindStored, BlockHashes: []uint64{u(-5)}, TokenIDs: []uint32{9, 8}, BlockSize: 2, Medium: "GPU",
				CacheSalt: "tenant-a", SessionID: "s1", LoRAName: "adapter"})},
		SGLangArray: {TS: 7, HasDPRank: true, Events: with(
			Event{Kind: KindStored, BlockHashes: []uint64{u(-5)}, TokenIDs: []uint32{9, 8}, BlockSize: 2, Medium: "GPU",
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
				var d Decoder
				got, err := d.Decode(payload)
				if err != nil {
					t.Fatal(err)
				}
				want := b
				if env == EnvelopeLegacy {
					want.DPRank, want.HasDPRank = 0, false
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
	ev := Event{Kind: KindRemoved, BlockHashes: []uint64{1}, Tier: TierHost}
	b := Batch{Events: []Event{ev}}
	tests := []struct {
		name    string
		mediums map[Tier]string
		medium  string
		want    string
	}{
		{"default", nil, "", "CPU"},
		{"override", map[Tier]string{TierHost: "CPU_TIER1"}, "", "CPU_TIER1"},
		{"event wins", map[Tier]string{TierHost: "CPU_TIER1"}, "CPU_PINNED", "CPU_PINNED"},
	}
	for _, tc := range tests {
		b.Events[0].Medium = tc.medium
		e := Encoder{Format: VLLMArray, Mediums: tc.mediums}
		payload, err := e.Encode(b)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !bytes.Contains(payload, str(tc.want)) {
			t.Errorf("%s: payload %x lacks medium %q", tc.name, payload, tc.want)
		}
	}
}

func TestEncodeRefuses(t *testing.T) {
	stored := Event{Kind: KindStored, BlockHashes: []uint64{1}, TokenIDs: tokens1234, BlockSize: 4}
	edit := func(e Event, f func(*Event)) Event { f(&e); return e }
	tests := []struct {
		name   string
		format Format
		ev     Event
	}{
		{"ownership in vLLM array", VLLMArray, edit(stored, func(e *Event) { e.Ownership = OwnedByRunner })},
		{"ownership in SGLang map", SGLangMap, edit(stored, func(e *Event) { e.Ownership = OwnedByRunner })},
		{"runner-owned cleared in SGLang", SGLangArray, Event{Kind: KindCleared, Ownership: OwnedByRunner}},
		{"worker-owned EXTERNAL", VLLMMap, edit(stored, func(e *Event) { e.Tier = TierExternal })},
		{"medium of another tier", VLLMMap, edit(stored, func(e *Event) { e.Medium = "CPU" })},
		{"unknown medium", VLLMMap, edit(stored, func(e *Event) { e.Medium = "TAPE" })},
		{"locality in array", VLLMArray, edit(stored, func(e *Event) { e.Locality = "LOCAL" })},
		{"locality in SGLang", SGLangMap, edit(stored, func(e *Event) { e.Locality = "LOCAL" })},
		{"session in vLLM array", VLLMArray, edit(stored, func(e *Event) { e.SessionID = "s" })},
		{"group in SGLang", SGLangMap, edit(stored, func(e *Event) { e.GroupIdx = 1 })},
		{"spec kind in SGLang", SGLangArray, edit(stored, func(e *Event) { e.SpecKind = "mamba" })},
		{"lora name in SGLang array", SGLangArray, edit(stored, func(e *Event) { e.LoRAName = "l" })},
		{"cache salt in vLLM under a parent", VLLMMap, edit(stored, func(e *Event) { e.CacheSalt, e.HasParent, e.ParentHash = "s", true, 9 })},
		{"extra-keys digest in vLLM", VLLMArray, edit(stored, func(e *Event) { e.BlockExtra = []uint64{7} })},
		{"extra-keys digest in SGLang", SGLangMap, edit(stored, func(e *Event) { e.BlockExtra = []uint64{7} })},
		{"token count", VLLMMap, edit(stored, func(e *Event) { e.BlockSize = 3 })},
		{"placeholder with tokens", VLLMMap, edit(stored, func(e *Event) { e.Placeholder = true })},
		{"empty tokens not marked placeholder", VLLMMap, edit(stored, func(e *Event) { e.TokenIDs = nil })},
		{"negative block size", VLLMMap, edit(stored, func(e *Event) { e.BlockSize = -1 })},
		{"unknown kind", VLLMMap, Event{Kind: 9}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := Encoder{Format: tc.format}
			dst := []byte("keep")
			out, err := e.Append(dst, Batch{Events: []Event{tc.ev}})
			if !errors.Is(err, ErrUnencodable) {
				t.Fatalf("error %v, want ErrUnencodable", err)
			}
			if string(out) != "keep" {
				t.Errorf("dst changed on error: %q", out)
			}
		})
	}
	if _, err := (&Encoder{Format: 9}).Encode(Batch{}); !errors.Is(err, ErrUnencodable) {
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
	for _, n := range []int{0, 15, 16, 65535, 65536} {
		s := string(make([]byte, n))
		var r reader
		r.b = appendStr(nil, s)
		got, err := r.str()
		if err != nil || len(got) != n || r.left() != 0 {
			t.Errorf("string of %d bytes read back as %d (%v)", n, len(got), err)
		}
	}
}

// TestEncodeLoRAExtraKeys: vLLM hashes an adapter's name with every block
// of its requests, and the salt with a salted root block only, and says so
// in extra_keys.
func TestEncodeLoRAExtraKeys(t *testing.T) {
	for _, tc := range []struct {
		ev   Event
		want []any
	}{
		{Event{HasParent: true, ParentHash: 4, LoRAName: "sql"}, []any{[]any{"sql"}, []any{"sql"}}},
		{Event{LoRAName: "sql", CacheSalt: "tenant-a"}, []any{[]any{"sql", "tenant-a"}, []any{"sql"}}},
		{Event{CacheSalt: "tenant-a"}, []any{[]any{"tenant-a"}, nil}},
		{Event{}, []any{nil, nil}},
	} {
		ev := tc.ev
		ev.Kind, ev.BlockHashes, ev.TokenIDs, ev.BlockSize, ev.Medium = KindStored, []uint64{5, 6}, []uint32{1, 2}, 1, "GPU"
		payload, err := (&Encoder{Format: VLLMMap}).Encode(Batch{Events: []Event{ev}})
		if err != nil {
			t.Fatal(err)
		}
		var raw []any
		if err := msgpack.Unmarshal(payload, &raw); err != nil {
			t.Fatal(err)
		}
		stored := raw[1].([]any)[0].(map[string]any)
		if got := stored[keyExtraKeys]; !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%+v: extra_keys %#v, want %#v", tc.ev, got, tc.want)
		}
		var d Decoder
		b, err := d.Decode(payload)
		if err != nil || b.Events[0].LoRAName != tc.ev.LoRAName || b.Events[0].CacheSalt != tc.ev.CacheSalt || b.Events[0].BlockExtra != nil {
			t.Errorf("%+v: decoded %+v, %v", tc.ev, b.Events, err)
		}
	}
}
