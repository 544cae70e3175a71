package direct

import (
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"kvrouter/internal/cost"
	"kvrouter/internal/hints"
	"kvrouter/internal/kvencode"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvhash"
	"kvrouter/internal/kvstream"
	"kvrouter/internal/router"
)

const testBS = 4

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// prompt returns blocks full blocks of token ids.
func prompt(base uint32, blocks int) []uint32 {
	out := make([]uint32, blocks*testBS)
	for i := range out {
		out[i] = base + uint32(i)
	}
	return out
}

// engineHashes are SGLang's page hashes: what a real engine would send.
func engineHashes(toks []uint32, salt string) []uint64 {
	return kvhash.SGLangPageHashes(toks, testBS, salt)
}

func stored(toks []uint32, tier kvevents.Tier, medium string) kvevents.Event {
	return kvevents.Event{Kind: kvevents.KindStored, BlockHashes: engineHashes(toks, ""), TokenIDs: toks, BlockSize: testBS,
		Tier: tier, Medium: medium}
}

func removed(hashes []uint64) kvevents.Event {
	return kvevents.Event{Kind: kvevents.KindRemoved, BlockHashes: hashes, Tier: kvevents.TierDevice}
}

// newIngest is the direct event ingest of one worker, a vLLM one unless
// keys (more --worker keys) say otherwise, into a router of its own, and a
// function that returns how many blocks of toks, under salt, the worker's
// rank 0 holds, its runner's included.
func newIngest(t *testing.T, keys string) (*ingest, func(toks []uint32, salt string) int) {
	t.Helper()
	in, r := newIngestRouter(t, keys)
	held := func(toks []uint32, salt string) int {
		d, err := r.Decide(router.Request{Model: "m", Tokens: toks, Salt: salt})
		if err != nil {
			t.Fatal(err)
		}
		return d.Overlap
	}
	return in, held
}

// newIngestRouter is the direct event ingest of worker w and its router.
func newIngestRouter(t *testing.T, keys string) (*ingest, *router.Router) {
	t.Helper()
	r, err := router.New(router.Config{Weights: cost.DefaultWeights(),
		Policy: func(int) (hints.Policy, error) { return hints.MinBlocks(1), nil }})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := ParseWorkerSpec("url=http://w,id=w,block_size=" + strconv.Itoa(testBS) + keys)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Upsert(spec.worker("m", true), time.Now()); err != nil {
		t.Fatal(err)
	}
	sink, err := r.Sink("w")
	if err != nil {
		t.Fatal(err)
	}
	return newEngineIngest(spec, sink, NewMetrics(prometheus.NewRegistry()), quiet(), time.Now, false), r
}

func (in *ingest) send(t *testing.T, evs ...kvevents.Event) {
	t.Helper()
	in.handle(batchOn(t, "", evs...), 0)
}

// batchOn is a live batch of evs on topic.
func batchOn(t *testing.T, topic string, evs ...kvevents.Event) kvstream.Message {
	t.Helper()
	enc := kvencode.Encoder{Format: kvencode.VLLMMap}
	b, err := enc.Encode(kvevents.Batch{TS: 1, Events: evs})
	if err != nil {
		t.Fatal(err)
	}
	return kvstream.Message{Topic: topic, Payload: b}
}

// dropped is the ingest's count of events dropped for reason.
func (in *ingest) dropped(t *testing.T, reason string) float64 {
	t.Helper()
	var m dto.Metric
	if err := in.m.eventDropped.WithLabelValues(reason).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestIngestHybridGroups: a hybrid model's groups share block hashes, and
// vLLM's removals name the group only: a sliding-window group's removal
// leaves the full-attention group's block, the full group's own removes it.
func TestIngestHybridGroups(t *testing.T) {
	in, held := newIngest(t, "")
	toks := prompt(41, 3)
	full, window := stored(toks, kvevents.TierDevice, "GPU"), stored(toks, kvevents.TierDevice, "GPU")
	full.SpecKind, window.SpecKind, window.GroupIdx = "full_attention", "sliding_window", 1
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
	in, held := newIngest(t, "")
	toks := prompt(42, 2)
	in.send(t, stored(toks, kvevents.TierDevice, "GPU"))
	if got := held(toks, ""); got != 2 {
		t.Fatalf("after the store the worker holds %d blocks, want 2", got)
	}
	in.handle(kvstream.Message{Payload: []byte{0x93, 0xc3}}, 0) // an array of three whose timestamp is a bool
	if got := held(toks, ""); got != 0 {
		t.Fatalf("after a batch that does not decode the worker holds %d blocks, want 0", got)
	}
}

// TestIngestVLLMSalt: vLLM names a salt in a prefix's first block only;
// what is stored under a salted root carries it, so a salted request
// matches both stores and an unsalted one neither.
func TestIngestVLLMSalt(t *testing.T) {
	in, held := newIngest(t, "")
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

// TestIngestTPShards: with tp > 1 each TP rank's runner reports its shard
// of the rank's runner inventory on a topic of its own, and a peer pulling
// a block needs every shard: the cache owner holds a block only while all
// TP ranks do.
func TestIngestTPShards(t *testing.T) {
	const topic = "kv"
	toks := prompt(44, 3)
	hashes := engineHashes(toks, "")
	store := stored(toks, kvevents.TierExternal, "EXTERNAL")
	store.Ownership = kvevents.OwnedByRunner
	remove := kvevents.Event{Kind: kvevents.KindRemoved, BlockHashes: hashes[1:], Tier: kvevents.TierExternal,
		Medium: "EXTERNAL", Ownership: kvevents.OwnedByRunner}
	on := func(tp int, ev kvevents.Event) kvstream.Message {
		return batchOn(t, kvevents.RunnerShardTopic(topic, tp), ev)
	}
	// Replay frames carry no topic: kvstream stamps the topic of the live
	// message that opened the gap, maybe another shard's.
	replayed := func(ev kvevents.Event) kvstream.Message {
		m := on(0, ev)
		m.Replayed = true
		return m
	}
	steps := []struct {
		what string
		it   kvstream.Item
		want int // blocks of toks held
	}{
		{"TP rank 0 stores", on(0, store), 0},
		{"TP rank 1 stores", on(1, store), 3},
		{"TP rank 0 stores again", on(0, store), 3},
		{"TP rank 1 removes", on(1, remove), 1},
		{"a replayed store of an unknown shard", replayed(store), 1},
		{"TP rank 1 stores again", on(1, store), 3},
		{"a replayed removal of an unknown shard", replayed(remove), 1},
		{"TP rank 0 stores again", on(0, store), 1},
		{"TP rank 1 stores again", on(1, store), 3},
		{"the engine restarts", kvstream.Restart{Key: "kv", OldSeq: 9, NewSeq: 0}, 0},
		{"TP rank 1 stores in the new process", on(1, store), 0},
		{"TP rank 0 stores in the new process", on(0, store), 3},
		{"a runner store on the plain topic names no shard", batchOn(t, topic, store), 3},
		// Rejected whole, and since it may have carried removals the rank
		// starts over.
		{"a shard topic beyond tp=", on(2, remove), 0},
	}
	in, held := newIngest(t, ",engine=sglang,tp=2")
	for _, st := range steps {
		in.handle(st.it, 0)
		if got := held(toks, ""); got != st.want {
			t.Fatalf("after %s the worker holds %d blocks, want %d", st.what, got, st.want)
		}
	}
	if got := in.dropped(t, "tp_shard"); got != 1 {
		t.Fatalf("%v batches rejected for their shard topic, want 1", got)
	}
}

// TestIngestReconnect: after the event stream reconnects, what the router
// knew of the worker is forgotten: the publisher may be a restarted engine
// whose seqs happen to run past the old one's, whose cache is not the old
// one's.
func TestIngestReconnect(t *testing.T) {
	toks := prompt(45, 3)
	in, held := newIngest(t, "")
	in.send(t, stored(toks, kvevents.TierDevice, "GPU"))
	if got := held(toks, ""); got != 3 {
		t.Fatalf("the worker holds %d blocks before the reconnect, want 3", got)
	}
	in.handle(kvstream.Reconnected{Endpoint: "tcp://w:5557"}, 0)
	if got := held(toks, ""); got != 0 {
		t.Fatalf("the worker holds %d blocks after the reconnect, want 0", got)
	}
	in.send(t, stored(toks, kvevents.TierDevice, "GPU"))
	if got := held(toks, ""); got != 3 {
		t.Fatalf("the worker holds %d blocks after storing them again, want 3", got)
	}
}

// TestIngestTPShardUndeclared: a worker whose --worker has no tp= cannot
// fold the shards its engine reports; one shard's inventory would pass for
// the rank's, so shard topics are rejected and counted, and replayed runner
// stores, which name no shard, are left out.
func TestIngestTPShardUndeclared(t *testing.T) {
	toks := prompt(45, 2)
	store := stored(toks, kvevents.TierExternal, "EXTERNAL")
	store.Ownership = kvevents.OwnedByRunner
	in, held := newIngest(t, ",engine=sglang")
	// Before any live shard batch: a replay of a gap a shard's batch
	// opened carries that batch's topic (kvstream stamps it), and names
	// no shard of its own.
	replayed := batchOn(t, kvevents.RunnerShardTopic("kv", 1), store)
	replayed.Replayed = true
	in.handle(replayed, 0)
	if got := held(toks, ""); got != 0 {
		t.Fatalf("after a replayed runner store the worker holds %d blocks, want 0", got)
	}
	for tp := range 2 {
		in.handle(batchOn(t, kvevents.RunnerShardTopic("kv", tp), store), 0)
	}
	if got := held(toks, ""); got != 0 {
		t.Fatalf("after both shards' stores the worker holds %d blocks, want 0", got)
	}
	if got, left := in.dropped(t, "tp_shard"), in.dropped(t, "unattributed"); got != 2 || left != 1 {
		t.Fatalf("%v batches rejected for their shard topic, %v replayed stores left out; want 2 and 1", got, left)
	}
	// A replayed batch names no shard: its runner store is maybe one
	// shard's too, whatever topic the gap's opener had.
	replayed = batchOn(t, "kv", store)
	replayed.Replayed = true
	in.handle(replayed, 0)
	if got := held(toks, ""); got != 0 {
		t.Fatalf("after a replayed runner store the worker holds %d blocks, want 0", got)
	}
	if got := in.dropped(t, "unattributed"); got != 2 {
		t.Fatalf("%v replayed runner stores left out, want 2", got)
	}
	// The engine's own events still count, live or replayed.
	in.handle(batchOn(t, "kv", stored(toks[:testBS], kvevents.TierDevice, "GPU")), 0)
	if got := held(toks, ""); got != 1 {
		t.Fatalf("after a store on the plain topic the worker holds %d blocks, want 1", got)
	}
	replayed = batchOn(t, "kv", stored(toks, kvevents.TierDevice, "GPU"))
	replayed.Replayed = true
	in.handle(replayed, 0)
	if got := held(toks, ""); got != 2 {
		t.Fatalf("after a replayed store of the engine's the worker holds %d blocks, want 2", got)
	}
}

// TestIngestRejectsWholeBatch: a batch with one event the worker cannot
// take (another block size) is refused whole, none of its other events
// applied, and the rank starts over: the batch may have carried removals.
func TestIngestRejectsWholeBatch(t *testing.T) {
	in, held := newIngest(t, "")
	toks, other := prompt(46, 3), prompt(47, 2)
	in.send(t, stored(toks, kvevents.TierDevice, "GPU"))
	if got := held(toks, ""); got != 3 {
		t.Fatalf("after the store the worker holds %d blocks, want 3", got)
	}
	bad := stored(prompt(48, 1), kvevents.TierDevice, "GPU")
	bad.BlockSize *= 2
	bad.TokenIDs = append(bad.TokenIDs, bad.TokenIDs...)
	in.send(t, stored(other, kvevents.TierDevice, "GPU"), bad)
	if a, b := held(toks, ""), held(other, ""); a != 0 || b != 0 {
		t.Fatalf("after a rejected batch the worker holds %d and %d blocks, want 0 and 0", a, b)
	}
	if got := in.dropped(t, "block_size"); got != 1 {
		t.Fatalf("%v batches rejected for their block size, want 1", got)
	}
	in.send(t, stored(other, kvevents.TierDevice, "GPU"))
	if got := held(other, ""); got != 2 {
		t.Fatalf("after the next batch the worker holds %d blocks, want 2", got)
	}
}

// TestIngestReadiness: a rank's sources may be named by hints once their
// stream delivers a batch, not while a gap is open, and again once it is
// healed; after a reconnect, once a batch proves the stream alive.
func TestIngestReadiness(t *testing.T) {
	in, r := newIngestRouter(t, ",dp=2")
	ready := func() string {
		ws, _ := r.View()
		var out []string
		for _, rv := range ws[0].Ranks {
			out = append(out, strconv.FormatBool(rv.Ready))
		}
		for _, ov := range ws[0].Owners {
			out = append(out, ov.ID+"="+strconv.FormatBool(ov.Ready))
		}
		return strings.Join(out, " ")
	}
	const none = "false false w#runner0=false w#runner1=false"
	steps := []struct {
		what string
		it   kvstream.Item
		rank int
		want string
	}{
		{"nothing yet", nil, 0, none},
		{"rank 1's first batch", batchOn(t, ""), 1, "false true w#runner0=false w#runner1=true"},
		{"rank 0's first batch", batchOn(t, ""), 0, "true true w#runner0=true w#runner1=true"},
		{"a gap on rank 0", kvstream.Gap{Key: "k", From: 3, To: 4}, 0, "false true w#runner0=false w#runner1=true"},
		{"the gap healed", kvstream.Gap{Key: "k", From: 3, To: 4, Healed: true}, 0, "true true w#runner0=true w#runner1=true"},
		{"a reconnect of every rank", kvstream.Reconnected{}, -1, none},
		{"rank 0's next batch", batchOn(t, ""), 0, "true false w#runner0=true w#runner1=false"},
	}
	for _, st := range steps {
		if st.it != nil {
			in.handle(st.it, st.rank)
		}
		if got := ready(); got != st.want {
			t.Fatalf("after %s: ready %q, want %q", st.what, got, st.want)
		}
	}
}
