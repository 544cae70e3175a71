package kvstream

import (
	"testing"
)

func BenchmarkTrackerLiveInOrder(b *testing.B) {
	var tr Tracker
	dst := make([]Item, 0, 4)
	payload := []byte("payload")
	b.ReportAllocs()
	for i := range b.N {
		dst, _ = tr.Live(dst[:0], "tcp://10.0.0.1:5557", Message{Topic: "kv", Seq: uint64(i), Payload: payload}, true)
	}
}

func BenchmarkParseMessage(b *testing.B) {
	frames := EncodeMessage("kv@10.0.0.1:8000@model", 12345, make([]byte, 256))
	b.ReportAllocs()
	for range b.N {
		if _, _, _, err := ParseMessage(frames); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStreamTCP measures batches per second through Publisher and
// Subscriber over loopback TCP, 256-byte payloads, one publisher.
func BenchmarkStreamTCP(b *testing.B) {
	p := startPub(b, PublisherConfig{Endpoint: anyTCP, HWM: 1 << 30})
	ep := tcpEndpoint(p.Addr())
	_, out := startSub(b, Config{Endpoint: ep})
	probe(b, pubSender(b, p, "kv"), out)
	payload := make([]byte, 256)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		for range b.N {
			p.Publish("kv", payload)
		}
	}()
	for n := 0; n < b.N; {
		switch v := nextItem(b, out).(type) {
		case Message:
			if isProbe(v) {
				continue
			}
			n++
		default:
			b.Fatalf("unexpected %s", itemString(v))
		}
	}
}
