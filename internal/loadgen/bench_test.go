package loadgen

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"kvrouter/internal/workload"
)

// BenchmarkBody: encoding a 100k-token prompt is on the TTFT path.
func BenchmarkBody(b *testing.B) {
	r := workload.Request{ID: "r", Prompt: make([]uint32, 100_000), MaxTokens: 64}
	for i := range r.Prompt {
		r.Prompt[i] = uint32(1000 + i%29000)
	}
	d := &Driver{Model: "m"}
	b.SetBytes(int64(len(d.body(r))))
	for b.Loop() {
		d.body(r)
	}
}

// BenchmarkStreamReader: one 256-token completion stream, usage included.
func BenchmarkStreamReader(b *testing.B) {
	var sb strings.Builder
	for i := range 256 {
		fmt.Fprintf(&sb, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" t%d\",\"finish_reason\":null}]}\n\n", i)
	}
	sb.WriteString("data: " + usageChunk + "\n\ndata: [DONE]\n\n")
	stream := sb.String()
	b.SetBytes(int64(len(stream)))
	for b.Loop() {
		sr := newStreamReader(strings.NewReader(stream))
		for {
			ev, err := sr.next()
			if err != nil {
				b.Fatal(err)
			}
			if ev == eventDone {
				break
			}
		}
	}
}

// BenchmarkDriver: the driver's own cost per request against an engine
// that answers at once with 16 tokens, 8 in flight.
func BenchmarkDriver(b *testing.B) {
	e := newEngine(&testing.T{}, func(w *sseWriter, c captured) {
		for range 16 {
			w.token("x")
		}
		w.usage(len(c.prompt), 16, 0, 0)
		w.done()
	})
	defer e.srv.Close()
	reqs := make([]workload.Request, 256)
	for i := range reqs {
		reqs[i] = workload.Request{ID: fmt.Sprint(i), Prompt: make([]uint32, 2048), MaxTokens: 16}
	}
	d := &Driver{BaseURL: e.srv.URL, Model: "m", Concurrency: 8, ClosedLoop: true}
	b.ResetTimer()
	for b.Loop() {
		e.mu.Lock()
		e.got = e.got[:0]
		e.mu.Unlock()
		res, err := d.Run(context.Background(), reqs, nil)
		if err != nil || res.Summary().Errors != 0 {
			b.Fatal(err, res.Summary().Errors)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(reqs)), "ns/request")
}
