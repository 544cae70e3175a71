package kvevents

import (
	"github.com/zeebo/xxh3"

	"errors"
	"reflect"
	"strconv"
	"sync"
	"testing"
)

const hashH = 0x84b146b151d55111 // H of docs/wire.md §3.10

var tokens1234 = []uint32{1, 2, 3, 4}

// vllmStored is a vLLM map-form BlockStored of one block [1,2,3,4] with
// extra fields appended; each pair may repeat a key to override it.
func vllmStored(extra ...[]mp) mp {
	base := fields(
		kv(KeyType, str(TagStored)),
		kv(KeyBlockHashes, arr(u64(hashH))),
		kv(KeyParent, null),
		kv(KeyTokenIDs, arr(uv(1), uv(2), uv(3), uv(4))),
		kv(KeyBlockSize, uv(4)),
		kv(KeyLoRAID, null),
		kv(KeyMedium, str("GPU")),
	)
	return obj(append(base, fields(extra...)...)...)
}

func vllmRemoved(extra ...[]mp) mp {
	base := fields(
		kv(KeyType, str(TagRemoved)),
		kv(KeyBlockHashes, arr(u64(hashH))),
		kv(KeyMedium, str("GPU")),
	)
	return obj(append(base, fields(extra...)...)...)
}

// wantStored is the event vllmStored decodes to, changed by edit.
func wantStored(edit func(*Event)) Event {
	ev := Event{Kind: KindStored, BlockHashes: []uint64{hashH}, TokenIDs: tokens1234, BlockSize: 4, Medium: "GPU"}
	if edit != nil {
		edit(&ev)
	}
	return ev
}

func wantRemoved(edit func(*Event)) Event {
	ev := Event{Kind: KindRemoved, BlockHashes: []uint64{hashH}, Medium: "GPU"}
	if edit != nil {
		edit(&ev)
	}
	return ev
}

func wantBatch(events ...Event) Batch {
	return Batch{TS: 1700000000.5, HasDPRank: true, Events: events}
}

func TestDecode(t *testing.T) {
	digest := make([]byte, 32)
	for i := range digest {
		digest[i] = byte(i)
	}
	const digestTail = 0x18191a1b1c1d1e1f
	tests := []struct {
		name    string
		payload []byte
		want    Batch
		stats   Stats // counters other than Batches and Events
	}{
		{
			name:    "spec V1 vLLM map",
			payload: mustHex(t, specV1),
			want: wantBatch(
				wantStored(func(e *Event) { e.SpecKind, e.ExtraKeys = "full_attention", true }),
				wantRemoved(nil)),
		},
		{
			name:    "spec V3 SGLang map",
			payload: mustHex(t, specV3),
			want: wantBatch(
				Event{Kind: KindStored, BlockHashes: []uint64{u(-3488128144981237669), 5674439469042975057},
					TokenIDs: []uint32{1, 2, 3, 4, 5, 6, 7, 8}, BlockSize: 4, Medium: "GPU"},
				wantRemoved(func(e *Event) { e.BlockHashes = []uint64{5674439469042975057} })),
		},
		{
			name:    "2-element envelope",
			payload: arr(f64(1.5), arr(vllmRemoved())),
			want:    Batch{TS: 1.5, Events: []Event{wantRemoved(nil)}},
		},
		{
			name:    "nil dp rank",
			payload: arr(f64(1.5), arr(), null),
			want:    Batch{TS: 1.5},
		},
		{
			name:    "extra envelope positions skipped",
			payload: arr(f64(1.5), arr(), uv(2), str("future")),
			want:    Batch{TS: 1.5, DPRank: 2, HasDPRank: true},
			stats:   Stats{UnknownKeys: 1},
		},
		{
			name: "map envelope any order",
			payload: obj(str(KeyDPRank), uv(3), str("publisher"), str("x"),
				str(KeyEvents), arr(vllmRemoved()), str(KeyTS), f64(2.5)),
			want:  Batch{TS: 2.5, DPRank: 3, HasDPRank: true, Events: []Event{wantRemoved(nil)}},
			stats: Stats{UnknownKeys: 1},
		},
		{
			name:    "float32 and int timestamps",
			payload: arr(raw(t, "ca3fc00000"), arr(), iv(-1)),
			want:    Batch{TS: 1.5, DPRank: -1, HasDPRank: true},
		},
		{
			name: "map fields in any order, type last",
			payload: batch(obj(
				str(KeyMedium), str("CPU"), str(KeyBlockSize), uv(2), str(KeyBlockHashes), arr(uv(7), uv(8)),
				str(KeyTokenIDs), arr(uv(1), uv(2), uv(3), uv(4)), str(KeyParent), uv(6), str(KeyType), str(TagStored))),
			want: wantBatch(Event{Kind: KindStored, BlockHashes: []uint64{7, 8}, ParentHash: 6, HasParent: true,
				TokenIDs: tokens1234, BlockSize: 2, Tier: TierHost, Medium: "CPU"}),
		},
		{
			name: "parent 0 is a root (llm-d simulator array form)",
			payload: batch(obj(
				str(KeyType), str(TagStored), str(KeyBlockHashes), arr(uv(7), uv(8)), str(KeyParent), uv(0),
				str(KeyTokenIDs), arr(uv(1), uv(2), uv(3), uv(4)), str(KeyBlockSize), uv(2), str(KeyMedium), str("CPU"))),
			want: wantBatch(Event{Kind: KindStored, BlockHashes: []uint64{7, 8},
				TokenIDs: tokens1234, BlockSize: 2, Tier: TierHost, Medium: "CPU"}),
		},
		{
			name: "every vLLM map field",
			payload: batch(vllmStored(
				kv(KeyLoRAID, iv(3)), kv(KeyLoRAName, str("adapter")), kv(KeyExtraKeys, arr(arr(str("mm"), uv(0)))),
				kv(KeyGroupIdx, uv(1)), kv(KeySpecKind, str("sliding_window")), kv(KeySlidingWindow, uv(128)),
				kv(KeyLocality, str("REMOTE")), kv(KeyOwnership, str(OwnerKVCR)), kv(KeySessionID, str("sess-1")))),
			want: wantBatch(wantStored(func(e *Event) {
				e.LoRAID, e.HasLoRAID, e.LoRAName = 3, true, "adapter"
				e.GroupIdx, e.SpecKind, e.Locality = 1, "sliding_window", "REMOTE"
				e.Ownership, e.SessionID = OwnedByRunner, "sess-1"
				e.BlockExtra = []uint64{xxh3.Hash(cat([]mp{str("mm"), uv(0)})) | 1}
				e.ExtraKeys = true
			})),
		},
		{
			name:    "vLLM salt: a root block's lone extra key",
			payload: batch(vllmStored(kv(KeyExtraKeys, arr(arr(str("tenant-a")))))),
			want:    wantBatch(wantStored(func(e *Event) { e.CacheSalt, e.ExtraKeys = "tenant-a", true })),
		},
		{
			name:    "vLLM salt after the LoRA name, which every block repeats",
			payload: batch(vllmStored(kv(KeyLoRAName, str("l")), kv(KeyExtraKeys, arr(arr(str("l"), str("tenant-a")))))),
			want:    wantBatch(wantStored(func(e *Event) { e.LoRAName, e.CacheSalt, e.ExtraKeys = "l", "tenant-a", true })),
		},
		{
			name:    "vLLM extra keys of a LoRA block alone",
			payload: batch(vllmStored(kv(KeyExtraKeys, arr(arr(str("l")))), kv(KeyLoRAName, str("l")))),
			want:    wantBatch(wantStored(func(e *Event) { e.LoRAName, e.ExtraKeys = "l", true })),
		},
		{
			name:    "vLLM extra key of a block under a parent: not a salt",
			payload: batch(vllmStored(kv(KeyParent, u64(5)), kv(KeyExtraKeys, arr(arr(str("img-1")))))),
			want: wantBatch(wantStored(func(e *Event) {
				e.ParentHash, e.HasParent, e.ExtraKeys = 5, true, true
				e.BlockExtra = []uint64{xxh3.Hash(str("img-1")) | 1}
			})),
		},
		{
			name:    "vLLM salt next to a multimodal key: both digested",
			payload: batch(vllmStored(kv(KeyExtraKeys, arr(arr(str("img-1"), str("tenant-a")))))),
			want: wantBatch(wantStored(func(e *Event) {
				e.BlockExtra = []uint64{xxh3.Hash(cat([]mp{str("img-1"), str("tenant-a")})) | 1}
				e.ExtraKeys = true
			})),
		},
		{
			name:    "vLLM extra keys all nil",
			payload: batch(vllmStored(kv(KeyExtraKeys, arr(null)))),
			want:    wantBatch(wantStored(func(e *Event) { e.ExtraKeys = true })),
		},
		{
			name: "SGLang map fields",
			payload: batch(vllmStored(kv(KeyCacheSalt, str("tenant-a")), kv(KeySessionID, str("s")),
				kv(KeyLoRAName, str("l")))),
			want: wantBatch(wantStored(func(e *Event) { e.CacheSalt, e.SessionID, e.LoRAName = "tenant-a", "s", "l" })),
		},
		{
			name:    "nil optional fields",
			payload: batch(vllmStored(kv(KeyGroupIdx, null), kv(KeyOwnership, null), kv(KeyCacheSalt, null), kv(KeyMedium, null))),
			want:    wantBatch(wantStored(func(e *Event) { e.Medium = "" })),
		},
		{
			name:    "unknown map keys skipped",
			payload: batch(vllmStored(kv("future_field", arr(obj(str("a"), uv(1)))), kv("other", null)), vllmRemoved(kv(KeyTokenIDs, arr()))),
			want:    wantBatch(wantStored(nil), wantRemoved(nil)),
			stats:   Stats{UnknownKeys: 3},
		},
		{
			name: "unknown tags skipped",
			payload: batch(obj(str(KeyType), str("BlockMoved"), str(KeyBlockHashes), arr(uv(1))),
				arr(str("Heartbeat"), uv(1), arr()), vllmRemoved()),
			want:  wantBatch(wantRemoved(nil)),
			stats: Stats{UnknownTags: 2},
		},
		{
			name: "cleared: array, map, runner-owned",
			payload: batch(arr(str(TagCleared)), obj(str(KeyType), str(TagCleared)),
				obj(str(KeyOwnership), str(OwnerKVCR), str(KeyType), str(TagCleared))),
			want: wantBatch(Event{Kind: KindCleared}, Event{Kind: KindCleared},
				Event{Kind: KindCleared, Ownership: OwnedByRunner}),
		},
		{
			name:    "bin digest hashes",
			payload: batch(vllmStored(kv(KeyBlockHashes, arr(bin(digest))), kv(KeyParent, bin(digest)))),
			want: wantBatch(wantStored(func(e *Event) {
				e.BlockHashes, e.ParentHash, e.HasParent = []uint64{digestTail}, digestTail, true
			})),
		},
		{
			name: "signed and unsigned hash encodings",
			payload: batch(vllmRemoved(kv(KeyBlockHashes, arr(raw(t, "ff"), raw(t, "e0"), raw(t, "d0ff"), raw(t, "d1fffe"),
				raw(t, "d2fffffffd"), i64(-4), uv(5), raw(t, "cc06"), raw(t, "cd0007"), raw(t, "ce00000008"), u64(1<<63))))),
			want: wantBatch(wantRemoved(func(e *Event) {
				e.BlockHashes = []uint64{u(-1), u(-32), u(-1), u(-2), u(-3), u(-4), 5, 6, 7, 8, 1 << 63}
			})),
		},
		{
			name:    "u32 tokens",
			payload: batch(vllmStored(kv(KeyTokenIDs, arr(u32(0xffffffff), u32(1<<31), raw(t, "cd0100"), uv(0))))),
			want:    wantBatch(wantStored(func(e *Event) { e.TokenIDs = []uint32{0xffffffff, 1 << 31, 256, 0} })),
		},
		{
			name: "EAGLE token pairs",
			payload: batch(vllmStored(kv(KeyTokenIDs, arr(arr(uv(1), uv(2)), arr(uv(2), uv(3)), arr(uv(3), uv(4)),
				arr(uv(4), u32(99)))))),
			want: wantBatch(wantStored(nil)),
		},
		{
			name: "placeholders",
			payload: batch(vllmStored(kv(KeyTokenIDs, arr()), kv(KeyMedium, str("CPU"))),
				vllmStored(kv(KeyBlockSize, uv(0)), kv(KeyMedium, str("CPU")))),
			want: wantBatch(
				wantStored(func(e *Event) { e.TokenIDs, e.Placeholder, e.Tier, e.Medium = nil, true, TierHost, "CPU" }),
				wantStored(func(e *Event) { e.BlockSize, e.Placeholder, e.Tier, e.Medium = 0, true, TierHost, "CPU" })),
			stats: Stats{Placeholders: 2},
		},
		{
			name:    "linker EXTERNAL is runner-owned",
			payload: batch(vllmRemoved(kv(KeyMedium, str("EXTERNAL")))),
			want:    wantBatch(wantRemoved(func(e *Event) { e.Tier, e.Medium, e.Ownership = TierExternal, "EXTERNAL", OwnedByRunner })),
		},
		{
			name:    "other external medium stays worker-owned",
			payload: batch(vllmRemoved(kv(KeyMedium, str("NETWORK")))),
			want:    wantBatch(wantRemoved(func(e *Event) { e.Tier, e.Medium = TierExternal, "NETWORK" })),
		},
		{
			name: "unknown medium dropped",
			payload: batch(vllmStored(kv(KeyMedium, str("TAPE")), kv(KeyLoRAName, str("x"))),
				vllmRemoved(kv(KeyMedium, str("gpu"))), vllmRemoved()),
			want:  wantBatch(wantRemoved(nil)),
			stats: Stats{DroppedMedium: 2},
		},
		{
			name: "foreign ownership dropped",
			payload: batch(vllmRemoved(kv(KeyOwnership, str("lmcache"))), vllmRemoved(kv(KeyOwnership, uv(1))),
				obj(str(KeyType), str(TagCleared), str(KeyOwnership), str("KVCR")), vllmRemoved(kv(KeyOwnership, str(OwnerKVCR)))),
			want:  wantBatch(wantRemoved(func(e *Event) { e.Ownership = OwnedByRunner })),
			stats: Stats{DroppedOwnership: 3},
		},
		{
			name:    "dropped event's data does not leak into the next",
			payload: batch(vllmStored(kv(KeyMedium, str("TAPE")), kv(KeyTokenIDs, arr(uv(9), uv(9), uv(9), uv(9))), kv(KeyCacheSalt, str("gone"))), vllmStored()),
			want:    wantBatch(wantStored(nil)),
			stats:   Stats{DroppedMedium: 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var d Decoder
			got, err := d.Decode(tc.payload)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Decode =\n%+v\nwant\n%+v", got, tc.want)
			}
			want := tc.stats
			want.Batches, want.Events = 1, uint64(len(tc.want.Events))
			if st := d.Stats(); st != want {
				t.Errorf("Stats = %+v\nwant    %+v", st, want)
			}
		})
	}
}

// u reinterprets a signed hash as the uint64 the decoder returns.
func u(v int64) uint64 { return uint64(v) }

func TestDecodeArrayForms(t *testing.T) {
	hashes := arr(u64(hashH))
	toks := arr(uv(1), uv(2), uv(3), uv(4))
	// vLLM's positional BlockStored, tag first; a prefix of n elements is
	// the n-element array of some build.
	full := []mp{str(TagStored), hashes, uv(9), toks, uv(4), iv(2), str("CPU"), str("adapter"),
		arr(null), uv(1), str("full_attention"), null}
	grow := func(e *Event, n int) {
		e.HasParent, e.ParentHash = true, 9
		e.Medium = ""
		if n > 5 {
			e.HasLoRAID, e.LoRAID = true, 2
		}
		if n > 6 {
			e.Tier, e.Medium = TierHost, "CPU"
		}
		if n > 7 {
			e.LoRAName = "adapter"
		}
		if n > 8 {
			e.ExtraKeys = true
		}
		if n > 9 {
			e.GroupIdx = 1
		}
		if n > 10 {
			e.SpecKind = "full_attention"
		}
	}
	type tc struct {
		name    string
		payload []byte
		want    Event
		unknown uint64
	}
	var tests []tc
	for n := 6; n <= 12; n++ {
		tests = append(tests, tc{
			name:    "vLLM BlockStored of " + strconv.Itoa(n),
			payload: batch(arr(full[:n]...)),
			want:    wantStored(func(e *Event) { grow(e, n) }),
		})
	}
	removed := []mp{str(TagRemoved), hashes, str("DISK"), uv(2)}
	for n := 2; n <= 4; n++ {
		tests = append(tests, tc{
			name:    "BlockRemoved of " + strconv.Itoa(n),
			payload: batch(arr(removed[:n]...)),
			want: wantRemoved(func(e *Event) {
				e.Medium = ""
				if n > 2 {
					e.Tier, e.Medium = TierDisk, "DISK"
				}
				if n > 3 {
					e.GroupIdx = 2
				}
			}),
		})
	}
	tests = append(tests,
		tc{
			name: "SGLang 8th-element map",
			payload: batch(arr(str(TagStored), arr(i64(-5)), null, toks, uv(4), null, str("GPU"),
				obj(str(KeyCacheSalt), str("tenant-a"), str("future"), uv(1)))),
			want: wantStored(func(e *Event) {
				e.BlockHashes, e.CacheSalt = []uint64{u(-5)}, "tenant-a"
			}),
			unknown: 1,
		},
		tc{
			name:    "positions beyond the last known skipped",
			payload: batch(arr(append(full[:12:12], str("x"), arr())...)),
			want:    wantStored(func(e *Event) { grow(e, 12) }),
			unknown: 2,
		},
	)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var d Decoder
			got, err := d.Decode(tc.payload)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if want := wantBatch(tc.want); !reflect.DeepEqual(got, want) {
				t.Errorf("Decode =\n%+v\nwant\n%+v", got, want)
			}
			if st := d.Stats(); st.UnknownKeys != tc.unknown {
				t.Errorf("UnknownKeys = %d, want %d", st.UnknownKeys, tc.unknown)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	v1 := mustHex(t, specV1)
	tests := []struct {
		name    string
		payload []byte
		max     int
		event   int
		field   string
		is      error
	}{
		{"empty payload", nil, 0, -1, "", ErrTruncated},
		{"oversized", v1, len(v1) - 1, -1, "payload", ErrTooLarge},
		{"oversized by default", make([]byte, DefaultMaxPayload+1), 0, -1, "payload", ErrTooLarge},
		{"not an envelope", str("hello"), 0, -1, "", ErrMalformed},
		{"1-element envelope", arr(f64(1)), 0, -1, "", ErrMalformed},
		{"ts not a number", arr(str("now"), arr()), 0, -1, KeyTS, ErrMalformed},
		{"events not an array", arr(f64(1), obj()), 0, -1, KeyEvents, ErrMalformed},
		{"dp rank not an int", arr(f64(1), arr(), str("0")), 0, -1, KeyDPRank, ErrMalformed},
		{"trailing bytes", append(batch(), 0xc0), 0, -1, "", ErrMalformed},
		{"map envelope without events", obj(str(KeyTS), f64(1)), 0, -1, KeyEvents, ErrMalformed},
		{"array claims more than the payload", raw(t, "dd7fffffff"), 0, -1, "", ErrTruncated},
		{"event neither map nor array", batch(vllmRemoved(), uv(1)), 0, 1, "", ErrMalformed},
		{"empty event array", batch(arr()), 0, 0, KeyType, ErrMalformed},
		{"tag not a string", batch(arr(uv(1))), 0, 0, KeyType, ErrMalformed},
		{"map event without type", batch(obj(str(KeyBlockHashes), arr())), 0, 0, KeyType, ErrMalformed},
		{"stored without token_ids", batch(obj(str(KeyType), str(TagStored), str(KeyBlockHashes), arr(), str(KeyBlockSize), uv(4))), 0, 0, KeyTokenIDs, ErrMalformed},
		{"stored without block_size", batch(arr(str(TagStored), arr(), null, arr())), 0, 0, KeyBlockSize, ErrMalformed},
		{"removed without block_hashes", batch(arr(str(TagRemoved))), 0, 0, KeyBlockHashes, ErrMalformed},
		{"token count mismatch", batch(vllmRemoved(), vllmStored(kv(KeyBlockSize, uv(3)))), 0, 1, KeyTokenIDs, ErrMalformed},
		{"token count short", batch(vllmStored(kv(KeyBlockHashes, arr(uv(1), uv(2))))), 0, 0, KeyTokenIDs, ErrMalformed},
		{"negative token", batch(vllmStored(kv(KeyTokenIDs, arr(uv(1), iv(-2), uv(3), uv(4))))), 0, 0, KeyTokenIDs + "[1]", ErrMalformed},
		{"token beyond u32", batch(vllmStored(kv(KeyTokenIDs, arr(uv(1), uv(2), uv(1<<32), uv(4))))), 0, 0, KeyTokenIDs + "[2]", ErrMalformed},
		{"empty token pair", batch(vllmStored(kv(KeyTokenIDs, arr(arr(), uv(2), uv(3), uv(4))))), 0, 0, KeyTokenIDs + "[0]", ErrMalformed},
		{"hash a string", batch(vllmRemoved(kv(KeyBlockHashes, arr(uv(1), str("x"))))), 0, 0, KeyBlockHashes + "[1]", ErrMalformed},
		{"short digest", batch(vllmRemoved(kv(KeyBlockHashes, arr(bin([]byte{1, 2, 3}))))), 0, 0, KeyBlockHashes + "[0]", ErrMalformed},
		{"block_size a string", batch(vllmStored(kv(KeyBlockSize, str("4")))), 0, 0, KeyBlockSize, ErrMalformed},
		{"negative block_size", batch(vllmStored(kv(KeyBlockSize, iv(-4)))), 0, 0, KeyBlockSize, ErrMalformed},
		{"lora_id beyond int64", batch(vllmStored(kv(KeyLoRAID, u64(1<<63)))), 0, 0, KeyLoRAID, ErrMalformed},
		{"medium an int", batch(vllmRemoved(kv(KeyMedium, uv(1)))), 0, 0, KeyMedium, ErrMalformed},
		{"map key not a string", batch(obj(str(KeyType), str(TagRemoved), uv(1), uv(2))), 0, 0, "", ErrMalformed},
		{"reserved byte in skipped value", batch(vllmRemoved(kv("x", mp{0xc1}))), 0, 0, "x", ErrMalformed},
		{"truncated string", batch(vllmRemoved(kv(KeyLocality, raw(t, "a5414243")))), 0, 0, KeyLocality, ErrTruncated},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decoder{MaxPayload: tc.max}
			b, err := d.Decode(tc.payload)
			if err == nil {
				t.Fatalf("Decode = %+v, want an error", b)
			}
			if !errors.Is(err, tc.is) {
				t.Errorf("error %q is not %v", err, tc.is)
			}
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %T is not a *DecodeError", err)
			}
			if de.Event != tc.event || de.Field != tc.field {
				t.Errorf("error at event %d field %q, want event %d field %q (%v)", de.Event, de.Field, tc.event, tc.field, err)
			}
			if b.Events != nil {
				t.Errorf("a rejected batch returned %d events", len(b.Events))
			}
			if st := d.Stats(); st != (Stats{Rejected: 1}) {
				t.Errorf("Stats = %+v, want only Rejected 1", st)
			}
		})
	}
}

func TestDecodeErrorMessage(t *testing.T) {
	var d Decoder
	_, err := d.Decode(batch(vllmRemoved(), vllmStored(kv(KeyBlockSize, uv(3)))))
	const want = "kvevents: decode event 1 field token_ids: malformed payload: 4 token ids for 1 block_hashes of block_size 3"
	if err == nil || err.Error() != want {
		t.Errorf("error = %v\nwant    %s", err, want)
	}
}

// Every proper prefix of a valid payload is refused whole.
func TestDecodeTruncated(t *testing.T) {
	for _, name := range []string{specV1, specV3} {
		p := mustHex(t, name)
		for n := range len(p) {
			var d Decoder
			if _, err := d.Decode(p[:n]); !errors.Is(err, ErrMalformed) {
				t.Fatalf("prefix of %d bytes: error %v, want ErrMalformed", n, err)
			}
		}
	}
}

func TestDecodeDoesNotAlias(t *testing.T) {
	payload := batch(vllmStored(kv(KeyLoRAName, str("adapter"))), vllmStored(kv(KeyCacheSalt, str("salt"))))
	var d Decoder
	b, err := d.Decode(payload)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := d.Decode(payload)
	for i := range payload {
		payload[i] = 0xc1
	}
	if !reflect.DeepEqual(b, want) {
		t.Errorf("batch changed with its payload:\n%+v\nwant\n%+v", b, want)
	}
	_ = append(b.Events[0].BlockHashes, 1)
	_ = append(b.Events[0].TokenIDs, 1)
	if !reflect.DeepEqual(b.Events[1], want.Events[1]) {
		t.Error("appending to one event's slices changed the next event")
	}
}

func TestDecoderConcurrent(t *testing.T) {
	payloads := [][]byte{mustHex(t, specV1), mustHex(t, specV3), batch(vllmRemoved(kv(KeyMedium, str("TAPE"))))}
	var d Decoder
	const rounds = 200
	var wg sync.WaitGroup
	for _, p := range payloads {
		wg.Go(func() {
			want, _ := d.Decode(p)
			for range rounds {
				got, err := d.Decode(p)
				if err != nil || !reflect.DeepEqual(got, want) {
					t.Errorf("concurrent decode differs: %v", err)
					return
				}
				_ = d.Stats()
			}
		})
	}
	wg.Wait()
	st := d.Stats()
	if st.Batches != 3*(rounds+1) || st.Events != 4*(rounds+1) || st.DroppedMedium != rounds+1 {
		t.Errorf("Stats = %+v", st)
	}
}

// A huge batch's scratch is not pooled, and the decoder still works after.
func TestDecodeLargeBatch(t *testing.T) {
	n := 1 << 17
	toks := make([]mp, 4*n)
	hashes := make([]mp, n)
	for i := range n {
		hashes[i] = uv(uint64(i))
		for j := range 4 {
			toks[4*i+j] = uv(uint64(j))
		}
	}
	payload := batch(obj(str(KeyType), str(TagStored), str(KeyBlockHashes), arr(hashes...),
		str(KeyParent), null, str(KeyTokenIDs), arr(toks...), str(KeyBlockSize), uv(4)))
	var d Decoder
	b, err := d.Decode(payload)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Events[0]; len(got.BlockHashes) != n || len(got.TokenIDs) != 4*n || got.BlockHashes[n-1] != uint64(n-1) {
		t.Errorf("large store decoded to %d hashes, %d tokens", len(got.BlockHashes), len(got.TokenIDs))
	}
	want, _ := (&Decoder{}).Decode(mustHex(t, specV1))
	if got, err := d.Decode(mustHex(t, specV1)); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("decode after a large batch: %+v, %v; a fresh decoder reads %+v", got, err, want)
	}
}
