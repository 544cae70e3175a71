package hints

import (
	"fmt"
	"strings"
	"testing"

	"kvrouter/internal/index"
)

// benchBody is a chat request of about 100 KB, the size of a long prompt.
func benchBody(hint bool) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"qwen3-32b","messages":[`)
	for i := range 200 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"role":"user","content":"%s \"quoted\" turn %d"}`, strings.Repeat("lorem ipsum ", 40), i)
	}
	b.WriteString(`],"max_tokens":256,"temperature":0.7,"kv_transfer_params":{"do_remote_prefill":false`)
	if hint {
		b.WriteString(`,"kv_hint":{"actions":[]}`)
	}
	b.WriteString(`}}`)
	return []byte(b.String())
}

// benchRequest has nCand candidates, the one in the middle deepest; with
// ascending, each candidate is deeper than the one before, so none can be
// skipped without its Meta lookup.
func benchRequest(nCand, depth int, ascending bool) Request {
	c := chain(depth)
	metas := map[index.Source]Meta{}
	cands := make([]Candidate, nCand)
	for i := range cands {
		s := index.Source{Worker: fmt.Sprintf("w%03d", i)}
		metas[s] = Meta{CanConsume: true, Type: TypeAggregated, Endpoint: "tcp://10.0.0.1:25000", Ready: true}
		d := depth / 2
		switch {
		case ascending:
			d = depth/2 + i*(depth/2)/nCand
		case i == nCand/2:
			d = depth
		}
		cands[i] = Candidate{Source: s, Depth: d, Chain: c[:d], SaltKnown: true}
	}
	t := index.Source{Worker: "target"}
	return Request{Target: t, TargetMeta: Meta{CanConsume: true, Type: TypeAggregated, Ready: true},
		PrefixToBeat: depth / 4, Chain: c[:depth/4], Candidates: cands,
		Meta: func(s index.Source) (Meta, bool) { m, ok := metas[s]; return m, ok }}
}

func BenchmarkSelect(b *testing.B) {
	p := fixed(b, plain)
	for _, asc := range []bool{false, true} {
		req := benchRequest(64, 512, asc)
		b.Run(fmt.Sprintf("candidates=64/depth=512/ascending=%v", asc), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, d := Select(req, p); !d.Hinted() {
					b.Fatal(d)
				}
			}
		})
	}
}

func BenchmarkAppendEnvelope(b *testing.B) {
	h := Hint{Endpoint: "tcp://10.0.0.7:25000", BlockHashes: chain(512)}
	buf := make([]byte, 0, 16<<10)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendEnvelope(buf[:0], "req-0123456789", h)
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkParse(b *testing.B) {
	data := AppendEnvelope(nil, "req-0123456789", Hint{Endpoint: "tcp://10.0.0.7:25000", BlockHashes: chain(512)})
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkStrip(b *testing.B) {
	for _, hint := range []bool{false, true} {
		body := benchBody(hint)
		b.Run(fmt.Sprintf("hint=%v", hint), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, stripped, err := Strip(body); err != nil || stripped != hint {
					b.Fatal(stripped, err)
				}
			}
		})
	}
}

func BenchmarkAttach(b *testing.B) {
	body := benchBody(false)
	h := Hint{Endpoint: "tcp://10.0.0.7:25000", BlockHashes: chain(512)}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Attach(body, PlaceVLLM, "req-0123456789", h); err != nil {
			b.Fatal(err)
		}
	}
}
