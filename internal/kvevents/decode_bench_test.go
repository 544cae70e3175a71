package kvevents

import (
	"encoding/hex"
	"os"
	"testing"
)

// specV1 is the vector V1 of docs/wire.md §3.10: a vLLM map-form BlockStored + BlockRemoved.
const specV1 = "93cb41d954fc40200000928ba474797065ab426c6f636b53746f726564ac626c6f636b5f68617368657391cf84b146b151d55111b1706172656e745f626c6f636b5f68617368c0a9746f6b656e5f6964739401020304aa626c6f636b5f73697a6504a76c6f72615f6964c0a66d656469756da3475055a96c6f72615f6e616d65c0aa65787472615f6b65797391c0a967726f75705f69647800b26b765f63616368655f737065635f6b696e64ae66756c6c5f617474656e74696f6e84a474797065ac426c6f636b52656d6f766564ac626c6f636b5f68617368657391cf84b146b151d55111a66d656469756da3475055a967726f75705f6964780000"

// specV3 is the vector V3 of docs/wire.md §3.10: an SGLang map-form 2-page store + remove.
const specV3 = "93cb41d954fc402000009287a474797065ab426c6f636b53746f726564ac626c6f636b5f68617368657392d3cf97adeedb59e05bcf4ebfa8a1f3c34151b1706172656e745f626c6f636b5f68617368c0a9746f6b656e5f696473980102030405060708aa626c6f636b5f73697a6504a76c6f72615f6964c0a66d656469756da347505583a474797065ac426c6f636b52656d6f766564ac626c6f636b5f68617368657391cf4ebfa8a1f3c34151a66d656469756da347505500"

func mustHex(tb testing.TB, s string) []byte {
	tb.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// BenchmarkDecodeV1Map decodes V1 itself: two events a batch.
func BenchmarkDecodeV1Map(b *testing.B) {
	payload := mustHex(b, specV1)
	var d Decoder
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	events := 0
	for b.Loop() {
		batch, err := d.Decode(payload)
		if err != nil {
			b.Fatal(err)
		}
		events += len(batch.Events)
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkDecodeCapture decodes the llm-d simulator's map-form stream:
// 5-block stores of 80 u32 tokens and single-block removes.
func BenchmarkDecodeCapture(b *testing.B) {
	f, err := os.Open("testdata/sim-map.frames")
	if err != nil {
		b.Fatal(err)
	}
	frames, err := ReadFrames(f)
	f.Close()
	if err != nil {
		b.Fatal(err)
	}
	var d Decoder
	b.ReportAllocs()
	events, size := 0, 0
	for _, fr := range frames {
		size += len(fr.Payload)
	}
	b.SetBytes(int64(size))
	for b.Loop() {
		for _, fr := range frames {
			batch, err := d.Decode(fr.Payload)
			if err != nil {
				b.Fatal(err)
			}
			events += len(batch.Events)
		}
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}
