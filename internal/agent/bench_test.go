package agent

import (
	"testing"

	"kvrouter/internal/index"
	"kvrouter/internal/ingest"
	"kvrouter/internal/kvencode"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvstream"
	"kvrouter/internal/relay"
	"kvrouter/internal/workerconfig"
)

// countPlane commits like relay.Publisher but only counts messages, so the
// benchmark measures the core and the local index, not the transport.
type countPlane struct{ n int }

func (p *countPlane) Commit(_ index.Source, _ relay.Kind, _ []index.Op, change func() error) error {
	if err := change(); err != nil {
		return err
	}
	p.n++
	return nil
}

// BenchmarkCoreHandle feeds a linker worker's stream: each batch extends a
// request's chain by 4 GPU pages of 16 tokens, mirrors them as runner
// pages, and evicts the pages of a request 64 batches older.
func BenchmarkCoreHandle(b *testing.B) {
	d := descriptor(b, workerconfig.EngineSGLang, "sglang_linker_tp1")
	enc := kvencode.Encoder{Format: kvencode.SGLangMap}
	const chains, perBatch = 64, 4
	var msgs []kvstream.Message
	hash := uint64(1)
	var live [][]uint64
	for i := range 4096 {
		var hashes []uint64
		var toks []uint32
		for j := range perBatch {
			hashes = append(hashes, hash)
			hash++
			for k := range 16 {
				toks = append(toks, uint32(i*1000+j*16+k))
			}
		}
		evs := []kvevents.Event{
			{Kind: kvevents.KindStored, BlockHashes: hashes, TokenIDs: toks, BlockSize: 16},
			{Kind: kvevents.KindStored, BlockHashes: hashes, TokenIDs: toks, BlockSize: 16, Tier: kvevents.TierExternal, Ownership: kvevents.OwnedByRunner},
		}
		live = append(live, hashes)
		if len(live) > chains {
			old := live[0]
			live = live[1:]
			evs = append(evs, kvevents.Event{Kind: kvevents.KindRemoved, BlockHashes: old},
				kvevents.Event{Kind: kvevents.KindRemoved, BlockHashes: old, Tier: kvevents.TierExternal, Ownership: kvevents.OwnedByRunner})
		}
		payload, err := enc.Encode(kvevents.Batch{TS: 1, Events: evs})
		if err != nil {
			b.Fatal(err)
		}
		msgs = append(msgs, kvstream.Message{Topic: "kv-events", Seq: uint64(i), Payload: payload})
	}
	b.ReportAllocs()
	b.ResetTimer()
	var events uint64
	for n := 0; n < b.N; {
		plane := &countPlane{}
		core, err := NewCore("w", d, plane, quiet())
		if err != nil {
			b.Fatal(err)
		}
		for _, m := range msgs {
			if n == b.N {
				break
			}
			core.Handle(0, m)
			n++
		}
		events += core.Stats().Events
		if st := core.Stats(); st.Counts[ingest.ResetRejected]+st.Counts[ingest.DropUnknownParent] != 0 {
			b.Fatalf("unexpected %+v", st)
		}
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}
