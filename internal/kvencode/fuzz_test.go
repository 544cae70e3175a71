package kvencode

import (
	"bytes"
	"encoding/hex"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"kvrouter/internal/kvevents"
)

// decoderCorpus returns the payloads of kvevents' FuzzDecode corpus and of
// its engine captures: whatever the decoder accepts of them, the encoder
// must write back.
func decoderCorpus(tb testing.TB) [][]byte {
	var out [][]byte
	files, _ := filepath.Glob("../kvevents/testdata/fuzz/FuzzDecode/*")
	for _, name := range files {
		text, err := os.ReadFile(name)
		if err != nil {
			tb.Fatal(err)
		}
		// "go test fuzz v1", then []byte("...") on the second line.
		lines := strings.Split(strings.TrimSpace(string(text)), "\n")
		quoted, ok := strings.CutPrefix(lines[len(lines)-1], "[]byte(")
		if !ok {
			tb.Fatalf("%s: not a []byte corpus entry", name)
		}
		b, err := strconv.Unquote(strings.TrimSuffix(quoted, ")"))
		if err != nil {
			tb.Fatalf("%s: %v", name, err)
		}
		out = append(out, []byte(b))
	}
	for _, name := range []string{"sim-map", "sim-array"} {
		f, err := os.Open("../kvevents/testdata/" + name + ".frames")
		if err != nil {
			tb.Fatal(err)
		}
		frames, err := kvevents.ReadFrames(f)
		f.Close()
		if err != nil {
			tb.Fatal(err)
		}
		for _, fr := range frames {
			out = append(out, fr.Payload)
		}
	}
	if len(out) == 0 {
		tb.Fatal("no decoder corpus")
	}
	return out
}

// FuzzRoundTrip: every form that accepts a decoded batch gives it back
// unchanged through the decoder, but for the medium name, which the
// encoder always writes, and extra_keys, which only the vLLM forms write
// (always), and encodes it again to the same bytes.
func FuzzRoundTrip(f *testing.F) {
	for _, v := range []string{specV1, specV3} {
		b, err := hex.DecodeString(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for format, b := range roundTripBatches() {
		f.Add(mustEncode(f, format, b))
	}
	for _, p := range decoderCorpus(f) {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		var d kvevents.Decoder
		b, err := d.Decode(payload)
		if err != nil {
			return
		}
		want := b
		if b.Events != nil {
			want.Events = make([]kvevents.Event, len(b.Events))
			for i, ev := range b.Events {
				if ev.Medium == "" && ev.Kind != kvevents.KindCleared {
					ev.Medium = DefaultMedium(ev.Tier)
				}
				want.Events[i] = ev
			}
		}
		for format := VLLMMap; format <= SGLangArray; format++ {
			e := Encoder{Format: format}
			p, err := e.Encode(b)
			if err != nil {
				continue
			}
			got, err := d.Decode(p)
			if err != nil {
				t.Fatalf("%v: decoding our own encoding: %v", format, err)
			}
			g, w := got, want
			if w.Events != nil {
				// extra_keys: the vLLM forms write them on every store,
				// the SGLang forms never.
				w.Events = slices.Clone(w.Events)
				for i := range w.Events {
					w.Events[i].ExtraKeys = w.Events[i].Kind == kvevents.KindStored && (format == VLLMMap || format == VLLMArray)
				}
			}
			if math.IsNaN(w.TS) && math.IsNaN(g.TS) {
				g.TS, w.TS = 0, 0 // NaN equals nothing, itself included
			}
			if !reflect.DeepEqual(g, w) {
				t.Fatalf("%v: round trip\n%+v\nwant\n%+v", format, got, want)
			}
			if p2, err := e.Encode(got); err != nil || !bytes.Equal(p, p2) {
				t.Fatalf("%v: encoding is not stable (%v)", format, err)
			}
		}
	})
}
