package kvstream

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// onePublisher starts a bind-mode Subscriber that one publisher dials, the
// way the state agent subscribes to an engine rank that connects to it.
func onePublisher(t *testing.T, replay string) (ep string, s *Subscriber, out <-chan Item) {
	t.Helper()
	ep = freeTCP(t)
	s, out = startSub(t, Config{Endpoint: ep, Bind: true, OnePublisher: true, ReplayEndpoint: replay, Topic: "kv"})
	return ep, s, out
}

var fastBackoff = Backoff{Min: 5 * time.Millisecond, Max: 20 * time.Millisecond}

// A TP > 1 SGLang engine publishes its runner shards on topics of their own
// from its one PUB with its one seq counter. Tracked per topic, each topic
// would see the others' batches as gaps and replay them after newer ones.
func TestOnePublisherTopicsShareOneSeq(t *testing.T) {
	checkLeaks(t)
	replay := freeTCP(t)
	ep, s, out := onePublisher(t, replay)
	p := startPub(t, PublisherConfig{Endpoint: ep, ReplayEndpoint: bindTCP(replay), Backoff: fastBackoff})
	last, _ := probe(t, pubSender(t, p, "kv"), out)
	s0 := last + 100
	// One shard batch never reaches the subscriber: its gap is the only one.
	p.setSkip(func(seq uint64) bool { return seq == s0+3 })
	publishUpTo(t, p, s0)
	topics := []string{"kv", "kv|kvcr-tp0", "kv|kvcr-tp1", "kv|kvcr-tp0", "kv|kvcr-tp1", "kv"}
	base := s.Stats()
	for _, topic := range topics {
		if _, err := p.Publish(topic, []byte(topic)); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for len(got) < len(topics)+2 {
		it := nextItem(t, out)
		if isProbe(it) {
			continue
		}
		str := itemString(it)
		if m, ok := it.(Message); ok {
			str += " " + m.Topic
			if !m.Replayed && m.Topic != string(m.Payload) {
				t.Errorf("seq %d: topic %q carries the batch of %q", m.Seq, m.Topic, m.Payload)
			}
		}
		got = append(got, str)
	}
	m := func(off uint64, suffix string) string {
		return fmt.Sprintf("msg %s %d%s %s", ep, s0+off, suffix, topics[off])
	}
	want := []string{
		m(0, ""), m(1, ""), m(2, ""),
		fmt.Sprintf("gap %s %d-%d", ep, s0+3, s0+3),
		// Replay frames carry no topic: the batch gets the topic of the
		// live message that opened the gap.
		fmt.Sprintf("msg %s %d r %s", ep, s0+3, topics[4]),
		fmt.Sprintf("healed %s %d-%d", ep, s0+3, s0+3),
		m(4, ""), m(5, ""),
	}
	if !slices.Equal(got, want) {
		t.Fatalf("items:\n got %q\nwant %q", got, want)
	}
	if st := s.Stats(); st.Gaps-base.Gaps != 1 || st.Replays-base.Replays != 1 || st.Restarts != 0 {
		t.Fatalf("stats before %+v, after %+v: want one gap and one replay", base, st)
	}
}

// Each socket of a OnePublisher subscriber is one engine rank's: a
// connection that ends and another that delivers is the engine back, maybe
// a new process whose seq already passed the last one seen, so it is
// reported as in connect mode.
func TestOnePublisherReconnected(t *testing.T) {
	checkLeaks(t)
	ep, s, out := onePublisher(t, "")
	p1, err := NewPublisher(PublisherConfig{Endpoint: ep, Backoff: fastBackoff, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p1.Close() })
	if _, before := probe(t, pubSender(t, p1, "kv"), out); len(before) != 0 {
		t.Fatalf("items before the first connection's first batch: %q", before)
	}
	last, _ := p1.Publish("kv|kvcr-tp1", []byte("x"))
	expectItems(t, out, fmt.Sprintf("msg %s %d", ep, last))
	if err := p1.Close(); err != nil {
		t.Fatal(err)
	}
	// The new process's counter continues where the old one stopped: only
	// the reconnect tells it from the same process.
	p2 := startPub(t, PublisherConfig{Endpoint: ep, Backoff: fastBackoff, FirstSeq: last + 1})
	seq, before := probe(t, pubSender(t, p2, "kv"), out)
	want := fmt.Sprintf("reconnected %s", ep)
	if len(before) == 0 || before[0] != want {
		t.Fatalf("before the new connection's batch %d: got %q, want %q first", seq, before, want)
	}
	if st := s.Stats(); st.Reconnects != 1 || st.Restarts != 0 {
		t.Fatalf("stats: %+v", st)
	}
	// Later batches of the same connection are no reconnect.
	next, _ := p2.Publish("kv", []byte("y"))
	expectItems(t, out, fmt.Sprintf("msg %s %d", ep, next))
	if st := s.Stats(); st.Reconnects != 1 {
		t.Fatalf("stats: %+v", st)
	}
}

// A publisher back on a new connection while its old one still looked open
// (half-open: the old process's end not yet seen) is reported once the old
// one ends, before the new one sends anything: an idle engine too gets its
// catch-up.
func TestOnePublisherReconnectedWhenOldConnectionEnds(t *testing.T) {
	checkLeaks(t)
	ep, s, out := onePublisher(t, "")
	p1, err := NewPublisher(PublisherConfig{Endpoint: ep, Backoff: fastBackoff, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p1.Close() })
	probe(t, pubSender(t, p1, "kv"), out)
	p2 := startPub(t, PublisherConfig{Endpoint: ep, Backoff: fastBackoff})
	waitFor(t, "the second connection", func() bool { return p2.pub.Stats().Connections > 0 })
	select {
	case it := <-out:
		if !isProbe(it) {
			t.Fatalf("while the old connection lives: %s", itemString(it))
		}
	case <-time.After(50 * time.Millisecond):
	}
	if err := p1.Close(); err != nil {
		t.Fatal(err)
	}
	for {
		it := nextItem(t, out)
		if isProbe(it) {
			continue
		}
		if got := itemString(it); got != "reconnected "+ep {
			t.Fatalf("after the old connection ended: %s", got)
		}
		break
	}
	if st := s.Stats(); st.Reconnects != 1 {
		t.Fatalf("stats: %+v", st)
	}
}
