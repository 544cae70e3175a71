package kvencode

import (
	"encoding/hex"
	"testing"

	"kvrouter/internal/kvevents"
)

// SPEC 2.4's test vectors: V1, a vLLM map-form BlockStored and
// BlockRemoved of the block H; V3, an SGLang map-form two-page store and
// remove.
const (
	specV1 = "93cb41d954fc40200000928ba474797065ab426c6f636b53746f726564ac626c6f636b5f68617368657391cf84b146b151d55111b1706172656e745f626c6f636b5f68617368c0a9746f6b656e5f6964739401020304aa626c6f636b5f73697a6504a76c6f72615f6964c0a66d656469756da3475055a96c6f72615f6e616d65c0aa65787472615f6b65797391c0a967726f75705f69647800b26b765f63616368655f737065635f6b696e64ae66756c6c5f617474656e74696f6e84a474797065ac426c6f636b52656d6f766564ac626c6f636b5f68617368657391cf84b146b151d55111a66d656469756da3475055a967726f75705f6964780000"
	specV3 = "93cb41d954fc402000009287a474797065ab426c6f636b53746f726564ac626c6f636b5f68617368657392d3cf97adeedb59e05bcf4ebfa8a1f3c34151b1706172656e745f626c6f636b5f68617368c0a9746f6b656e5f696473980102030405060708aa626c6f636b5f73697a6504a76c6f72615f6964c0a66d656469756da347505583a474797065ac426c6f636b52656d6f766564ac626c6f636b5f68617368657391cf4ebfa8a1f3c34151a66d656469756da347505500"
	hashH  = 0x84b146b151d55111 // SPEC 2.4's H
)

var tokens1234 = []uint32{1, 2, 3, 4}

func mustHex(tb testing.TB, s string) []byte {
	tb.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// wantBatch is the envelope of the spec vectors around events.
func wantBatch(events ...kvevents.Event) kvevents.Batch {
	return kvevents.Batch{TS: 1700000000.5, HasDPRank: true, Events: events}
}

// u writes a signed hash as the uint64 events hold.
func u(v int64) uint64 { return uint64(v) }
