package gateway

import (
	"testing"
	"time"

	"kvrouter/internal/hints"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/router"
	"kvrouter/internal/schedule"
)

// newIngest is one vLLM worker's direct event ingest into a router of its
// own, and a function that returns how many blocks of toks, under salt,
// the worker holds.
func newIngest(t *testing.T) (*ingest, func(toks []uint32, salt string) int) {
	t.Helper()
	r, err := router.New(router.Config{Weights: schedule.DefaultWeights(),
		Policy: func(int) (hints.Policy, error) { return hints.MinBlocks(1), nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Upsert(router.Worker{ID: "w", Model: "m", URL: "http://w", Engine: router.EngineVLLM, BlockSize: testBS, DPSize: 1, Mode: router.ModeEvents}, time.Now()); err != nil {
		t.Fatal(err)
	}
	sink, err := r.Sink("w")
	if err != nil {
		t.Fatal(err)
	}
	in := &ingest{id: "w", dp: 1, sink: sink, m: NewMetrics(r.Stats), log: quiet(), now: time.Now}
	in.setReady(0, true)
	held := func(toks []uint32, salt string) int {
		d, err := r.Decide(router.Request{Model: "m", Tokens: toks, Salt: salt})
		if err != nil {
			t.Fatal(err)
		}
		return d.Overlap
	}
	return in, held
}

func (in *ingest) send(t *testing.T, evs ...kvevents.Event) {
	t.Helper()
	enc := kvevents.Encoder{Format: kvevents.VLLMMap}
	b, err := enc.Encode(kvevents.Batch{TS: 1, Events: evs})
	if err != nil {
		t.Fatal(err)
	}
	in.batch(b, 0)
}

// TestIngestHybridGroups: a hybrid model's groups share block hashes, and
// vLLM's removals name the group only: a sliding-window group's removal
// leaves the full-attention group's block, the full group's own removes it.
func TestIngestHybridGroups(t *testing.T) {
	in, held := newIngest(t)
	toks := prompt(41, 3)
	full, window := stored(toks, kvevents.TierDevice, "GPU"), stored(toks, kvevents.TierDevice, "GPU")
	full.SpecKind, window.SpecKind, window.GroupIdx = fullAttention, "sliding_window", 1
	in.send(t, full, window)
	if got := held(toks, ""); got != 3 {
		t.Fatalf("after the stores the worker holds %d blocks, want 3", got)
	}
	rm := removed(full.BlockHashes[1:])
	rm.GroupIdx = 1
	in.send(t, rm)
	if got := held(toks, ""); got != 3 {
		t.Fatalf("after the sliding-window group's removal the worker holds %d blocks, want 3", got)
	}
	rm.GroupIdx = 0
	in.send(t, rm)
	if got := held(toks, ""); got != 1 {
		t.Fatalf("after the full-attention group's removal the worker holds %d blocks, want 1", got)
	}
}

// TestIngestUndecodableBatch: a batch that does not decode may have held
// removals, so what the router knew of the rank is dropped.
func TestIngestUndecodableBatch(t *testing.T) {
	in, held := newIngest(t)
	toks := prompt(42, 2)
	in.send(t, stored(toks, kvevents.TierDevice, "GPU"))
	if got := held(toks, ""); got != 2 {
		t.Fatalf("after the store the worker holds %d blocks, want 2", got)
	}
	in.batch([]byte{0x93, 0xc3}, 0) // an array of three whose timestamp is a bool
	if got := held(toks, ""); got != 0 {
		t.Fatalf("after a batch that does not decode the worker holds %d blocks, want 0", got)
	}
}

// TestIngestVLLMSalt: vLLM names a salt in a prefix's first block only;
// what is stored under a salted root carries it, so a salted request
// matches both stores and an unsalted one neither.
func TestIngestVLLMSalt(t *testing.T) {
	in, held := newIngest(t)
	toks := prompt(43, 4)
	root, child := stored(toks[:2*testBS], kvevents.TierDevice, "GPU"), stored(toks[2*testBS:], kvevents.TierDevice, "GPU")
	root.CacheSalt = "tenant-a"
	child.BlockHashes = engineHashes(toks, "")[2:]
	child.ParentHash, child.HasParent = root.BlockHashes[1], true
	in.send(t, root, child)
	if a, none := held(toks, "tenant-a"), held(toks, ""); a != 4 || none != 0 {
		t.Fatalf("a salted root and a store under it: %d blocks match the salt, %d none; want 4 and 0", a, none)
	}
}
