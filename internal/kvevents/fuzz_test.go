package kvevents

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"testing"
)

// fuzzSeeds are payloads in every shape the decoder accepts, plus broken
// ones; the committed corpus under testdata/fuzz/FuzzDecode holds more.
func fuzzSeeds(tb testing.TB) [][]byte {
	seeds := [][]byte{
		mustHex(tb, specV1),
		mustHex(tb, specV3),
		mustHex(tb, specV1)[:100],
		arr(f64(1), arr(vllmRemoved())),
		obj(str(KeyEvents), arr(arr(str(TagCleared))), str(KeyTS), f64(1), str(KeyDPRank), null),
		batch(arr(str(TagStored), arr(i64(-5)), null, arr(arr(uv(1), uv(2))), uv(1), null, str("GPU"), obj(str(KeyCacheSalt), str("s")))),
		batch(vllmStored(kv(KeyBlockHashes, arr(bin(make([]byte, 32)))), kv(KeyOwnership, str(OwnerKVCR)))),
		batch(vllmRemoved(kv(KeyMedium, str("EXTERNAL")))),
		batch(vllmStored(kv(KeyTokenIDs, arr()), kv(KeyMedium, str("CPU")))),
		raw(tb, "dd7fffffff"),
	}
	for _, name := range []string{"sim-map", "sim-array"} {
		f, err := os.Open("testdata/" + name + ".frames")
		if err != nil {
			tb.Fatal(err)
		}
		frames, err := ReadFrames(f)
		f.Close()
		if err != nil {
			tb.Fatal(err)
		}
		for _, fr := range frames {
			seeds = append(seeds, fr.Payload)
		}
	}
	return seeds
}

func FuzzDecode(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		var d Decoder
		b, err := d.Decode(payload)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) || !(errors.Is(err, ErrMalformed) || errors.Is(err, ErrTooLarge)) {
				t.Fatalf("error %v is not a DecodeError wrapping a sentinel", err)
			}
			if b.Events != nil {
				t.Fatal("a rejected batch returned events")
			}
			return
		}
		for i, ev := range b.Events {
			if ev.Kind == KindStored && !ev.Placeholder && len(ev.TokenIDs) != len(ev.BlockHashes)*ev.BlockSize {
				t.Fatalf("event %d: %d tokens for %d blocks of %d", i, len(ev.TokenIDs), len(ev.BlockHashes), ev.BlockSize)
			}
		}
	})
}

func FuzzParseFrame(f *testing.F) {
	f.Add("kv@127.0.0.1:18102@fake-model 0000000000000001 93c0")
	f.Add(" ffffffffffffffff ")
	f.Add("a b c")
	f.Fuzz(func(t *testing.T, line string) {
		fr, err := ParseFrame(line)
		if err != nil {
			if !errors.Is(err, ErrBadFrame) {
				t.Fatalf("error %v is not ErrBadFrame", err)
			}
			return
		}
		back, err := ParseFrame(string(bytes.TrimSuffix(AppendFrame(nil, fr), []byte("\n"))))
		if err != nil || !reflect.DeepEqual(back, fr) {
			t.Fatalf("AppendFrame(%+v) reads back as %+v, %v", fr, back, err)
		}
	})
}
