package kvstream

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"kvrouter/internal/kvencode"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/zmtp"
)

// A publisher serving snapshot-v1 answers a cut of what its batches stored,
// stamps the barrier under the snapshot's epoch, and resumes after it; a
// subscriber's catch-up at start delivers the history through the barrier
// without waiting for a live batch.
func TestSnapshotServedAndCaughtUp(t *testing.T) {
	checkLeaks(t)
	p := startPub(t, PublisherConfig{Endpoint: anyTCP, ReplayEndpoint: anyTCP,
		Snapshot: SnapshotServerConfig{Endpoint: anyTCP, Topic: "kv", Epoch: "e1", ReplicaRank: 3}})
	live := "kv" + EpochSuffix("e1")
	store := func(parent uint64, hashes ...uint64) kvevents.Event {
		return kvevents.Event{Kind: kvevents.KindStored, ParentHash: parent, HasParent: parent != 0, BlockHashes: hashes}
	}
	for _, evs := range [][]kvevents.Event{
		{store(0, 1, 2, 3)},
		{store(3, 4), {Kind: kvevents.KindRemoved, BlockHashes: []uint64{4}}},
		{store(0, 9), {Kind: kvevents.KindCleared}, store(0, 5), store(5, 6)},
	} {
		if _, err := p.PublishEvents(live, []byte("batch"), evs); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	s, err := FetchSnapshot(ctx, tcpEndpoint(p.SnapshotAddr()), SnapshotClientConfig{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Header
	if h.Epoch != "e1" || h.ReplicaRank != 3 || h.BarrierSeq != 3 || h.ResumeSeq != 4 || len(h.BarrierID) != 32 || h.RecordCount != 2 {
		t.Fatalf("header %+v", h)
	}
	slices.SortFunc(s.Blocks, func(a, b kvevents.SnapshotBlock) int { return int(a.Hashes[0]) - int(b.Hashes[0]) })
	want := []kvevents.SnapshotBlock{{Hashes: []uint64{5}}, {Parent: 5, HasParent: true, Hashes: []uint64{6}}}
	if !slices.EqualFunc(s.Blocks, want, func(a, b kvevents.SnapshotBlock) bool {
		return a.Parent == b.Parent && a.HasParent == b.HasParent && slices.Equal(a.Hashes, b.Hashes)
	}) {
		t.Fatalf("blocks %+v, want %+v", s.Blocks, want)
	}

	// The catch-up delivers the history and the barrier (an empty batch)
	// at once; the next live batch follows it.
	_, out := startSub(t, Config{Endpoint: tcpEndpoint(p.Addr()), ReplayEndpoint: tcpEndpoint(p.ReplayAddr()), CatchUp: true})
	for seq := range uint64(4) {
		m := nextMessage(t, out)
		if m.Seq != seq || !m.Replayed {
			t.Fatalf("history: got %s, want seq %d replayed", itemString(m), seq)
		}
		if seq == h.BarrierSeq {
			b, err := (&kvevents.Decoder{}).Decode(m.Payload)
			if err != nil || len(b.Events) != 0 || b.DPRank != 3 {
				t.Fatalf("barrier batch %+v, %v", b, err)
			}
		}
	}
	seq, before := probe(t, pubSender(t, p, live), out)
	if seq != h.ResumeSeq || len(before) != 0 {
		t.Fatalf("first live seq %d after %q, want %d", seq, before, h.ResumeSeq)
	}
	// A second snapshot's barrier arrives live, its topic naming the epoch
	// and the barrier: TopicEpoch sees the epoch alone.
	s2, err := FetchSnapshot(ctx, tcpEndpoint(p.SnapshotAddr()), SnapshotClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	m := nextMessage(t, out)
	if m.Seq != s2.Header.BarrierSeq || m.Replayed || !strings.HasSuffix(m.Topic, s2.Header.BarrierID) ||
		TopicEpoch(m.Topic) != EpochSuffix("e1") || PublisherKey(m.Topic) != "kv" {
		t.Fatalf("live barrier %s topic %q epoch %q", itemString(m), m.Topic, TopicEpoch(m.Topic))
	}
}

// The client takes a complete answer or fails: an error frame, a record
// count the chunks do not match, frames out of place, no answer in time.
func TestSnapshotClientRefuses(t *testing.T) {
	checkLeaks(t)
	hdr := func(count uint64) []byte {
		return kvencode.AppendSnapshotHeader(nil, kvevents.SnapshotHeader{Version: 1, Epoch: "e", ResumeSeq: 1, RecordCount: count})
	}
	chunk := kvencode.AppendSnapshotChunk(nil, []kvevents.SnapshotBlock{{Hashes: []uint64{1}}})
	for _, tc := range []struct {
		name   string
		answer [][2]string // kind, payload
		want   error
		text   string
	}{
		{"error frame", [][2]string{{"error", "snapshot provider busy"}}, ErrSnapshotRefused, "snapshot provider busy"},
		{"fewer records than announced", [][2]string{{"header", string(hdr(2))}, {"chunk", string(chunk)}, {"end", ""}}, ErrSnapshot, "the header announced 2"},
		{"more records than announced", [][2]string{{"header", string(hdr(0))}, {"chunk", string(chunk)}}, ErrSnapshot, "more records"},
		{"chunk before the header", [][2]string{{"chunk", string(chunk)}}, ErrSnapshot, "unexpected"},
		{"bad header", [][2]string{{"header", "\x01"}}, ErrSnapshot, "snapshot header"},
		{"too many records", [][2]string{{"header", string(hdr(1 << 30))}}, ErrSnapshot, "at most"},
		{"no answer", nil, ErrSnapshot, "deadline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := fakeSnapshotServer(t, tc.answer)
			_, err := FetchSnapshot(context.Background(), ep, SnapshotClientConfig{Timeout: 300 * time.Millisecond, Logger: quietLogger()})
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("err %v, want %v naming %q", err, tc.want, tc.text)
			}
		})
	}
	// A request that is not snapshot-v1 gets SGLang's error frame.
	p := startPub(t, PublisherConfig{Endpoint: anyTCP, Snapshot: SnapshotServerConfig{Endpoint: anyTCP, Epoch: "e"}})
	d, err := zmtp.New(zmtp.Dealer, zmtp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := d.Dial(ctx, tcpEndpoint(p.SnapshotAddr())); err != nil {
		t.Fatal(err)
	}
	if err := d.Send(ctx, [][]byte{{}, []byte("snapshot-v2")}); err != nil {
		t.Fatal(err)
	}
	m, err := d.Recv(ctx)
	if err != nil || len(m.Frames) != 3 || string(m.Frames[1]) != "error" {
		t.Fatalf("answer %q, %v", m.Frames, err)
	}
}

// fakeSnapshotServer answers every request with answer's frames.
func fakeSnapshotServer(t *testing.T, answer [][2]string) string {
	t.Helper()
	r, err := zmtp.New(zmtp.Router, zmtp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := r.Recv(ctx)
			if err != nil {
				return
			}
			for _, f := range answer {
				if r.Send(ctx, [][]byte{m.Frames[0], {}, []byte(f[0]), []byte(f[1])}) != nil {
					return
				}
			}
		}
	}()
	t.Cleanup(func() { cancel(); r.Close(); <-done })
	return tcpEndpoint(r.Addr())
}
