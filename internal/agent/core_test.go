package agent

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"kvrouter/internal/index"
	"kvrouter/internal/ingest"
	"kvrouter/internal/kvencode"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvhash"
	"kvrouter/internal/kvstream"
	"kvrouter/internal/relay"
	"kvrouter/internal/workerconfig"
)

const (
	sglang = workerconfig.EngineSGLang
	vllm   = workerconfig.EngineVLLM
)

func TestSplitWorkerAndRunnerSGLang(t *testing.T) {
	h := newHarness(t, sglang, "sglang_linker_tp1")
	h.expect("", "w0=; o0=", "")
	// The linker reports runner-owned pages as medium EXTERNAL under the
	// same page hashes as its GPU events.
	h.feed(0, h.msg(0, "", h.ev("store", false, "A", "B"), h.ev("store", true, "A")))
	h.expect("ready:w0 ready:o0 ops:w0 ops:o0", "w0=A@0 B@0; o0=A@3", "o0 w0")
	h.feed(0, h.msg(0, "", h.ev("remove", false, "B"), h.ev("store", true, "B"), h.ev("remove", true, "A")))
	h.expect("ops:w0 ops:o0", "w0=A@0; o0=B@3", "o0 w0")
}

func TestSplitWorkerAndRunnerVLLM(t *testing.T) {
	h := newHarness(t, vllm, "vllm_kvcr")
	// vLLM's connector marks runner-owned blocks with ownership "kvcr".
	h.feed(0, h.msg(0, "", h.ev("store", true, "X", "Y"), h.ev("store", false, "X")))
	h.expect("ready:w0 ready:o0 ops:o0 ops:w0", "w0=X@0; o0=X@1 Y@1", "o0 w0")
}

func TestGapHealedByReplay(t *testing.T) {
	h := newHarness(t, sglang, "sglang_linker_tp1")
	h.feed(0, h.msg(0, "", h.ev("store", false, "A")))
	h.expect("ready:w0 ready:o0 ops:w0", "w0=A@0", "o0 w0")

	lost := h.msg(0, "", h.ev("store", false, "B"), h.ev("store", true, "A"))
	next := h.msg(0, "", h.ev("store", false, "C"))
	// While the replay runs, no hint may name the rank's sources.
	h.feed(0, kvstream.Gap{Key: "k", From: 1, To: 1})
	h.expect("reset:w0 reset:o0", "w0=; o0=", "")
	lost.Replayed = true
	h.feed(0, lost)
	h.expect("", "w0=; o0=", "")
	h.feed(0, kvstream.Gap{Key: "k", From: 1, To: 1, Healed: true})
	h.expect("ops:w0 ready:w0 ops:o0 ready:o0", "w0=A@0 B@0; o0=A@3", "o0 w0")
	h.feed(0, next)
	h.expect("ops:w0", "w0=A@0 B@0 C@0", "o0 w0")
	if st := h.core.Stats(); st.Gaps != 1 || st.Healed != 1 || st.Counts[ingest.ResetUnrecoverable] != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestUnhealableGapResetsAndRebuilds(t *testing.T) {
	h := newHarness(t, sglang, "sglang_linker_tp1")
	h.feed(0, h.msg(0, "", h.ev("store", false, "A", "B"), h.ev("store", true, "X")))
	h.expect("ready:w0 ready:o0 ops:w0 ops:o0", "w0=A@0 B@0; o0=X@3", "o0 w0")
	h.seq[0] += 2 // seqs 1 and 2 are lost
	h.feed(0, kvstream.Gap{Key: "k", From: 1, To: 2})
	h.expect("reset:w0 reset:o0", "w0=; o0=", "")
	h.feed(0, kvstream.Unrecoverable{Key: "k", From: 1, To: 2})
	h.expect("ready:w0 ready:o0", "w0=; o0=", "o0 w0")
	// C's parent B was stored before the reset: the rebuilt state cannot
	// name C's prefix, so C is skipped, never attached at the root.
	h.feed(0, h.msg(0, "", h.ev("store", false, "C"), h.ev("store", false, "X")))
	h.expect("ops:w0", "w0=X@0; o0=", "o0 w0")
	st := h.core.Stats()
	if st.Counts[ingest.ResetUnrecoverable] != 1 || st.Counts[ingest.DropUnknownParent] != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestEngineRestartResets(t *testing.T) {
	h := newHarness(t, sglang, "sglang_linker_tp1")
	h.feed(0, h.msg(0, "", h.ev("store", false, "A")), h.msg(0, "", h.ev("store", false, "B")))
	h.expect("ready:w0 ready:o0 ops:w0 ops:w0", "w0=A@0 B@0", "o0 w0")
	h.feed(0, kvstream.Restart{Key: "k", OldSeq: 1, NewSeq: 0})
	// The owner held nothing: consumers already mirror its empty state.
	h.expect("reset:w0 ready:w0", "w0=", "o0 w0")
	h.seq[0] = 0
	h.feed(0, h.msg(0, "", h.ev("store", false, "X", "Y")))
	h.expect("ops:w0", "w0=X@0 Y@0", "o0 w0")
	// From seq 0 on the new process's history is complete: a store under
	// a parent it never stored is a gap the seq did not show.
	h.feed(0, h.msg(0, "", h.ev("store", false, "C")))
	h.expect("reset:w0 ready:w0", "w0=", "o0 w0")
	if st := h.core.Stats(); st.Counts[ingest.ResetRestart] != 1 || st.Counts[ingest.ResetSilentGap] != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// An agent that joined late has not seen the stored parents: skipping is
// expected there, not a reason to reset.
func TestLateJoinSkipsUnknownParents(t *testing.T) {
	h := newHarness(t, sglang, "sglang_linker_tp1")
	h.seq[0] = 40
	h.feed(0, h.msg(0, "", h.ev("store", false, "C", "D"), h.ev("store", false, "A")))
	h.expect("ready:w0 ready:o0 ops:w0", "w0=A@0", "o0 w0")
	if st := h.core.Stats(); st.Counts[ingest.DropUnknownParent] != 1 || st.Counts[ingest.ResetSilentGap] != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// A group holding a refused store publishes only what the index accepted,
// each message applying cleanly at the consumer (the harness checks it).
func TestNoHalfAppliedGroup(t *testing.T) {
	h := newHarness(t, sglang, "sglang_linker_tp1")
	h.seq[0] = 7
	h.feed(0, h.msg(0, "", h.ev("store", false, "X"), h.ev("store", false, "C"), h.ev("remove", false, "X"), h.ev("store", false, "A")))
	h.expect("ready:w0 ready:o0 ops:w0 ops:w0", "w0=A@0", "o0 w0")
}

func TestAllBlocksCleared(t *testing.T) {
	h := newHarness(t, sglang, "sglang_linker_tp1")
	h.feed(0, h.msg(0, "", h.ev("store", false, "A"), h.ev("store", true, "A")))
	h.expect("ready:w0 ready:o0 ops:w0 ops:o0", "w0=A@0; o0=A@3", "o0 w0")
	h.feed(0, h.msg(0, "", h.ev("clear", false)))
	h.expect("ops:w0", "w0=; o0=A@3", "o0 w0")

	v := newHarness(t, vllm, "vllm_kvcr")
	v.feed(0, v.msg(0, "", v.ev("store", false, "A"), v.ev("store", true, "A")))
	v.expect("ready:w0 ready:o0 ops:w0 ops:o0", "w0=A@0; o0=A@1", "o0 w0")
	// vLLM's map form: a clear with ownership kvcr is the runner's only.
	v.feed(0, v.msg(0, "", v.ev("clear", true)))
	v.expect("ops:o0", "w0=A@0; o0=", "o0 w0")
}

func TestRejectedBatches(t *testing.T) {
	h := newHarness(t, sglang, "sglang_linker_tp1")
	h.feed(0, h.msg(0, "", h.ev("store", false, "A")))
	h.expect("ready:w0 ready:o0 ops:w0", "w0=A@0", "o0 w0")

	bad := h.ev("store", false, "B")
	bad.BlockSize, bad.HasParent = 8, false
	bad.TokenIDs = bad.TokenIDs[:8]
	bad.BlockHashes = []uint64{1}
	// The batch also removes A: rejected whole, nothing of it applies, and
	// since it may have carried removals the rank is rebuilt.
	h.feed(0, h.msg(0, "", h.ev("remove", false, "A"), h.ev("store", false, "X"), bad))
	h.expect("reset:w0 ready:w0", "w0=", "o0 w0")

	h.feed(0, kvstream.Message{Key: "k", Topic: h.topic, Seq: 9, Payload: []byte{0x93, 0xc1}})
	h.expect("", "w0=", "o0 w0") // nothing held: nothing to reset
	st := h.core.Stats()
	if st.Counts[ingest.RejectBlockSize] != 1 || st.Counts[ingest.RejectMalformed] != 1 || st.Counts[ingest.ResetRejected] != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestReconnectedAndEngineDown(t *testing.T) {
	h := newHarness(t, sglang, "sglang_linker_tp1")
	h.feed(0, h.msg(0, "", h.ev("store", false, "A")))
	h.expect("ready:w0 ready:o0 ops:w0", "w0=A@0", "o0 w0")
	h.feed(0, kvstream.Reconnected{Endpoint: "tcp://127.0.0.1:5557"})
	h.expect("reset:w0 reset:o0", "w0=", "")
	h.feed(0, h.msg(0, "", h.ev("store", false, "X")))
	h.expect("ready:w0 ready:o0 ops:w0", "w0=X@0", "o0 w0")

	h.core.SetEngineUp(false)
	h.check()
	h.expect("reset:w0 reset:o0", "w0=", "")
	// Events of a slow but living engine still apply, unpublished.
	h.feed(0, h.msg(0, "", h.ev("store", false, "X")))
	h.expect("", "w0=", "")
	h.core.SetEngineUp(true)
	h.check()
	h.expect("", "w0=", "")
	h.feed(0, h.msg(0, "", h.ev("store", false, "A")))
	h.expect("ops:w0 ready:w0 ready:o0 ops:w0", "w0=A@0 X@0", "o0 w0")
}

func TestEpochChangeResets(t *testing.T) {
	h := newHarness(t, sglang, "sglang_linker_tp1")
	h.feed(0, h.msg(0, h.topic+"\x00sgl-kv-epoch=1", h.ev("store", false, "A")))
	h.expect("ready:w0 ready:o0 ops:w0", "w0=A@0", "o0 w0")
	h.feed(0, h.msg(0, h.topic+"\x00sgl-kv-epoch=2", h.ev("store", false, "X")))
	h.expect("reset:w0 ready:w0 ops:w0", "w0=X@0", "o0 w0")
}

func TestRefusedTopologyRelaysWorkerInventoryOnly(t *testing.T) {
	h := newHarness(t, sglang, "sglang_pp2")
	if len(h.byName) != 1 {
		t.Fatalf("sources %v, want the worker rank only", h.byName)
	}
	h.feed(0, h.msg(0, "", h.ev("store", false, "A"), h.ev("store", true, "A")))
	h.expect("ready:w0 ops:w0", "w0=A@0", "w0")
	h.feed(0, h.msg(0, kvevents.RunnerShardTopic(h.topic, 0), h.ev("store", true, "X")))
	h.expect("", "w0=A@0", "w0")
	if st := h.core.Stats(); st.Counts[ingest.DropNoOwner] != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// TestTP2Shards folds a TP 2 rank's runner shards; an SGLang publisher may
// also name its epoch, which the shard suffix follows.
func TestTP2Shards(t *testing.T) {
	for _, epoch := range []string{"", "\x00sgl-kv-epoch=3"} {
		t.Run(fmt.Sprintf("epoch %q", epoch), func(t *testing.T) {
			h := newHarness(t, sglang, "sglang_linker_tp2")
			plain := h.topic + epoch
			shard := func(tp int) string { return kvevents.RunnerShardTopic(plain, tp) }
			h.feed(0, h.msg(0, shard(0), h.ev("store", true, "A", "B")))
			h.expect("ready:w0 ready:o0", "o0=", "o0 w0")
			h.feed(0, h.msg(0, shard(1), h.ev("store", true, "A")))
			h.expect("ops:o0", "o0=A@3", "o0 w0")
			h.feed(0, h.msg(0, shard(1), h.ev("store", true, "B")))
			h.expect("ops:o0", "o0=A@3 B@3", "o0 w0")
			// Runner inventory on the plain topic names no shard: a store is left
			// out, a removal withdraws the block from every shard.
			h.feed(0, h.msg(0, plain, h.ev("store", true, "X"), h.ev("remove", true, "B")))
			h.expect("ops:o0", "o0=A@3", "o0 w0")
			h.feed(0, h.msg(0, shard(1), h.ev("remove", true, "A")))
			h.expect("ops:o0", "o0=", "o0 w0")
			h.feed(0, h.msg(0, shard(2), h.ev("store", true, "A")))
			h.expect("", "o0=", "o0 w0")
			st := h.core.Stats()
			if st.Counts[ingest.RejectTopic] != 1 || st.Counts[ingest.DropUnattributed] != 1 || st.Counts[ingest.ResetEpoch] != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

func TestDPRanksAreIndependent(t *testing.T) {
	h := newHarness(t, vllm, "vllm_dp2")
	h.feed(0, h.msg(0, "", h.ev("store", false, "A"), h.ev("store", true, "A")))
	h.feed(1, h.msg(1, "", h.ev("store", false, "X")))
	h.expect("ready:w0 ready:o0 ops:w0 ops:o0 ready:w1 ready:o1 ops:w1", "w0=A@0; o0=A@1; w1=X@0; o1=", "o0 o1 w0 w1")
	h.feed(1, kvstream.Restart{Key: "k", OldSeq: 0, NewSeq: 0})
	h.expect("reset:w1 ready:w1", "w0=A@0; o0=A@1; w1=", "o0 o1 w0 w1")
}

// At stop the worker ranks are announced gone, and so are the cache owners
// that are not ready; a ready owner is left as it is (its runner still
// serves, and routers keep it detached for their TTL), in snapshots too.
func TestStopAnnouncesGone(t *testing.T) {
	h := newHarness(t, sglang, "sglang_linker_tp1")
	h.feed(0, h.msg(0, "", h.ev("store", false, "A"), h.ev("store", true, "A")))
	h.expect("ready:w0 ready:o0 ops:w0 ops:o0", "w0=A@0; o0=A@3", "o0 w0")
	h.core.Stop()
	h.expect("gone:w0", "o0=A@3", "o0")
	if s := h.plane.snapshot(h.core); len(s) != 1 || s[0].Source != h.byName["o0"] || !s[0].Ready || len(s[0].Ops) == 0 {
		t.Fatalf("snapshot after stop: %+v", s)
	}

	h = newHarness(t, sglang, "sglang_linker_tp1")
	h.feed(0, h.msg(0, "", h.ev("store", true, "A")))
	h.feed(0, kvstream.Gap{Key: "k", From: 1, To: 1})
	h.expect("ready:w0 ready:o0 ops:o0 reset:w0 reset:o0", "o0=", "")
	h.core.Stop()
	h.expect("gone:w0 gone:o0", "", "")
	if s := h.plane.snapshot(h.core); len(s) != 0 {
		t.Fatalf("snapshot after stop: %+v", s)
	}
}

// A hybrid model's other KV groups are left out; since removals do not say
// their group's kind, the stream no longer proves gaps by unknown parents.
func TestHybridGroups(t *testing.T) {
	h := newHarness(t, vllm, "vllm_kvcr")
	full := h.ev("store", false, "A")
	full.SpecKind = "full_attention"
	swa := h.ev("store", false, "X")
	swa.SpecKind, swa.GroupIdx = "sliding_window", 1
	h.feed(0, h.msg(0, "", full, swa))
	h.expect("ready:w0 ready:o0 ops:w0", "w0=A@0", "o0 w0")
	// Seq 0 was seen, yet after another group's traffic a store under an
	// unknown parent is skipped, not a reset.
	h.feed(0, h.msg(0, "", h.ev("store", false, "C")))
	h.expect("", "w0=A@0", "o0 w0")
	if st := h.core.Stats(); st.Counts[ingest.DropOtherGroup] != 1 || st.Counts[ingest.DropUnknownParent] != 1 || st.Counts[ingest.ResetSilentGap] != 0 {
		t.Fatalf("stats %+v", st)
	}
	// Groups share block hashes, and removals name the group only: the
	// sliding-window group's removal of A leaves the full group's A.
	rm := h.ev("remove", false, "A")
	rm.GroupIdx = 1
	h.feed(0, h.msg(0, "", rm))
	h.expect("", "w0=A@0", "o0 w0")
	rm.GroupIdx = 0
	h.feed(0, h.msg(0, "", rm))
	h.expect("ops:w0", "w0=", "o0 w0")
}

// A restarted SGLang publisher names a new epoch in its topics: the
// restart already rebuilt the rank, and the new process is seen from seq
// 0, so its history stays complete.
func TestEpochAfterRestartIsTheRestart(t *testing.T) {
	h := newHarness(t, sglang, "sglang_linker_tp1")
	topic := func(epoch int) string { return fmt.Sprintf("%s\x00sgl-kv-epoch=%d", h.topic, epoch) }
	h.feed(0, h.msg(0, topic(1), h.ev("store", false, "A")))
	h.expect("ready:w0 ready:o0 ops:w0", "w0=A@0", "o0 w0")
	h.feed(0, kvstream.Restart{Key: "k", OldSeq: 0, NewSeq: 0})
	h.expect("reset:w0 ready:w0", "w0=", "o0 w0")
	h.seq[0] = 0
	h.feed(0, h.msg(0, topic(2), h.ev("store", false, "X")))
	h.expect("ops:w0", "w0=X@0", "o0 w0")
	// Complete: a store under a parent the new process never stored is a
	// gap the seq did not show.
	h.feed(0, h.msg(0, topic(2), h.ev("store", false, "C")))
	h.expect("reset:w0 ready:w0", "w0=", "o0 w0")

	// After a reconnect the rank starts over; the epoch it then sees is
	// where it starts from, not a second rebuild.
	h.feed(0, kvstream.Reconnected{Endpoint: "tcp://127.0.0.1:5557"})
	h.expect("reset:w0 reset:o0", "w0=", "")
	h.feed(0, h.msg(0, topic(3), h.ev("store", false, "A")))
	h.expect("ready:w0 ready:o0 ops:w0", "w0=A@0", "o0 w0")
	st := h.core.Stats()
	if st.Counts[ingest.ResetRestart] != 1 || st.Counts[ingest.ResetSilentGap] != 1 || st.Counts[ingest.ResetReconnected] != 1 || st.Counts[ingest.ResetEpoch] != 0 {
		t.Fatalf("resets %v", st.Counts)
	}
}

// One engine batch can carry more than a NATS message may (a 64K-token
// prompt at SGLang's page size 1): against a server with NATS's default
// max_payload, a router still gets all of it, and nothing fails.
func TestLargeBatchReachesRouters(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(waitLimit) {
		t.Fatal("nats server did not start")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	d, err := workerconfig.Build(sglang, engineConfig(t, "sglang_linker_tp1", func(cfg, _, _ map[string]any) { cfg["page_size"] = 1 }),
		workerconfig.Options{AllowLoopback: true})
	if err != nil {
		t.Fatal(err)
	}
	pub := relay.NewPublisher(nc, relay.Prefix("w"), quiet())
	core, err := NewCore("w", d, pub, quiet())
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.ServeSnapshots(core.States); err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	ix, _ := index.New(index.Config{BlockSize: d.KVBlockSize})
	s := &sink{ix: ix, ready: map[index.Source]bool{}}
	f := &relay.Follower{NC: nc, Prefix: relay.Prefix("w"), Sink: s, Log: quiet()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	defer func() { cancel(); <-done }()

	var enc kvencode.Encoder
	enc.Format = kvencode.SGLangMap
	seq := uint64(0)
	send := func(first, n int) {
		ev := kvevents.Event{Kind: kvevents.KindStored, Tier: kvevents.TierDevice, BlockSize: 1}
		for i := range n {
			ev.BlockHashes = append(ev.BlockHashes, 1<<63|uint64(first+i))
			ev.TokenIDs = append(ev.TokenIDs, uint32(first+i))
		}
		p, err := enc.Encode(kvevents.Batch{TS: 1, HasDPRank: true, Events: []kvevents.Event{ev}})
		if err != nil {
			t.Fatal(err)
		}
		core.Handle(0, kvstream.Message{Key: "k", Topic: d.Events[0].Topic, Seq: seq, Payload: p})
		seq++
	}
	w := index.WorkerRank("w", 0)
	send(0, 1)
	eventually(t, "the router in step", func() bool { r, _ := s.isReady(w); return r })
	send(1, 64<<10)
	eventually(t, "the router to hold the batch", func() bool {
		s.mu.Lock()
		n := s.ix.Len()
		s.mu.Unlock()
		return n == core.Index().Len()
	})
	s.mu.Lock()
	same := reflect.DeepEqual(s.ix.Dump(w), core.Index().Dump(w))
	s.mu.Unlock()
	if r, _ := s.isReady(w); !r || !same {
		t.Fatalf("router ready %v, holds what the agent holds %v", r, same)
	}
	if st := core.Stats(); st.PublishErrors != 0 {
		t.Fatalf("%d publish errors", st.PublishErrors)
	}
}

// vLLM names a salt in a prefix's first block only; the blocks stored under
// a salted root carry it into the index (the router hashes every block of a
// salted request with it). How long a chain keeps its salt is the ingest
// suite's (internal/ingest/testdata/salt).
func TestVLLMSaltInherited(t *testing.T) {
	h := newHarness(t, vllm, "vllm_kvcr")
	root, child := h.ev("store", false, "A"), h.ev("store", false, "B")
	root.CacheSalt = "tenant-a"
	h.core.Handle(0, h.msg(0, "", root, child))
	toks := append(append([]uint32(nil), h.tr.Tokens["A"]...), h.tr.Tokens["B"]...)
	depth := func(salt string) int32 {
		got := h.core.loc.ix.Match(kvhash.LocalHashes(toks, h.tr.BlockSize, kvhash.SeedFor("", salt)), index.MatchOptions{})
		if len(got) == 0 {
			return 0
		}
		return got[0].Depth
	}
	if a, none := depth("tenant-a"), depth(""); a != 2 || none != 0 {
		t.Fatalf("salted A then B under it: depth %d for the salt, %d without; want 2 and 0", a, none)
	}
}
