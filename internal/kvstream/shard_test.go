package kvstream

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
)

// A TP > 1 kvrouter engine publishes its runners' shards under
// kvevents.RunnerShardTopic of its topic, from its one PUB with its one seq
// counter. Sharing a bind-mode socket with other engines, its shard topics
// must be tracked as the engine's stream: tracked apart, each would see the
// others' batches as gaps. Another engine's topic is still a stream of its
// own, with its own counter.
func TestBindModeRunnerShardTopics(t *testing.T) {
	const epoch = epochSep + "5"
	engines := []struct {
		key    string
		topics []string // of seq 0, 1, 2, 3
	}{
		{key: "kv@a:1@m", topics: []string{"kv@a:1@m", "kv@a:1@m|kvcr-tp1", "kv@a:1@m", "kv@a:1@m|kvcr-tp1"}},
		// The shard suffix follows SGLang's epoch suffix.
		{key: "kv@b:2@m", topics: []string{"kv@b:2@m" + epoch + "|kvcr-tp0", "kv@b:2@m" + epoch, "kv@b:2@m" + epoch + "|kvcr-tp1", "kv@b:2@m" + epoch}},
		{key: "kv@c:3@m", topics: []string{"kv@c:3@m|kvcr-tp0", "kv@c:3@m|kvcr-tp1", "kv@c:3@m|kvcr-tp0", "kv@c:3@m|kvcr-tp1"}},
	}
	checkLeaks(t)
	ep := freeTCP(t)
	s, out := startSub(t, Config{Endpoint: ep, Bind: true})
	// A bare PUB sends the engines' batches with the seqs we choose, all on
	// one connection, so they arrive in the order sent.
	pub := rawSocket(t, zmq4.NewPub, "")
	for deadline := time.Now().Add(waitLimit); pub.Dial(ep) != nil; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the subscriber never bound")
		}
	}
	var probeSeq uint64
	probe(t, func(payload []byte) uint64 {
		probeSeq++
		send(t, pub, EncodeMessage("kv@probe:9@m", probeSeq, payload)...)
		return probeSeq
	}, out)
	base := s.Stats()

	for seq := range 4 {
		for _, e := range engines {
			send(t, pub, EncodeMessage(e.topics[seq], uint64(seq), []byte(e.topics[seq]))...)
		}
	}
	got := map[string][]uint64{}
	for range 4 * len(engines) {
		m := nextMessage(t, out)
		if m.Topic != string(m.Payload) {
			t.Errorf("%s: topic %q carries the batch of %q", itemString(m), m.Topic, m.Payload)
		}
		got[m.Key] = append(got[m.Key], m.Seq)
	}
	for _, e := range engines {
		if want := []uint64{0, 1, 2, 3}; !slices.Equal(got[e.key], want) {
			t.Errorf("key %q: got seqs %v, want %v", e.key, got[e.key], want)
		}
	}
	if len(got) != len(engines) {
		t.Errorf("keys %v, want one per engine", fmt.Sprint(got))
	}
	if st := s.Stats(); st.Gaps != base.Gaps || st.Unrecoverable != base.Unrecoverable || st.Restarts != base.Restarts {
		t.Fatalf("stats before %+v, after %+v: want no gap, loss or restart", base, st)
	}
}
