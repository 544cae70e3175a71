package mocker

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvhash"
	"kvrouter/internal/kvstream"
	"kvrouter/internal/workerconfig"
)

// The SGLang flavour serves snapshot-v1 as SGLang does: its live topics
// name the rank's epoch, and a cut holds exactly what the history before
// its barrier left stored, whatever the medium (the GPU's blocks and the
// runner's, by hash).
func TestEventsSnapshot(t *testing.T) {
	e := startEngine(t, func(c *Config) { c.Topic = "kv-events"; c.SnapshotEndpoint = "tcp://*:0" })
	if ep := e.eventsConfig()[workerconfig.EventsSnapshot]; ep != "tcp://*:0" {
		t.Fatalf("kv_events_config names snapshot endpoint %v", ep)
	}
	prompt := longPrompt(t, e, "snap", 300)
	complete(t, e, peerBody(prompt, nil))
	keys := kvhash.SGLangPageHashes(tokenize(t, e, prompt), 64, "")
	if err := e.Idle(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	s, err := kvstream.FetchSnapshot(testCtx(t), e.SnapshotEndpoint(0), kvstream.SnapshotClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cut := map[uint64]bool{}
	for _, b := range s.Blocks {
		cut[b.Hashes[0]] = true
	}
	for _, k := range keys {
		if !cut[k] {
			t.Fatalf("the cut lacks stored block %#x", k)
		}
	}

	// The history through the barrier, replayed from 0, leaves the cut's
	// blocks stored; every live topic names the cut's epoch.
	sb := subscribeWith(t, kvstream.Config{Endpoint: e.EventEndpoint(0), ReplayEndpoint: e.ReplayEndpoint(0), CatchUp: true})
	held := map[uint64]bool{}
	var dec kvevents.Decoder
	for seq := uint64(0); seq < s.Header.ResumeSeq; seq++ {
		it := <-sb.ch
		m, ok := it.(kvstream.Message)
		if !ok || m.Seq != seq {
			t.Fatalf("history item %#v, want seq %d", it, seq)
		}
		b, err := dec.Decode(m.Payload)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range b.Events {
			switch ev.Kind {
			case kvevents.KindStored:
				for _, h := range ev.BlockHashes {
					held[h] = true
				}
			case kvevents.KindRemoved:
				for _, h := range ev.BlockHashes {
					delete(held, h)
				}
			case kvevents.KindCleared:
				clear(held)
			}
		}
	}
	if !maps.Equal(held, cut) {
		t.Fatalf("history leaves %d blocks stored, the cut holds %d", len(held), len(cut))
	}
	complete(t, e, peerBody(longPrompt(t, e, "after", 100), nil))
	m := (<-sb.ch).(kvstream.Message)
	if m.Seq != s.Header.ResumeSeq || kvstream.TopicEpoch(m.Topic) != kvstream.EpochSuffix(s.Header.Epoch) || kvstream.TopicKey(m.Topic) != "kv-events" {
		t.Fatalf("live batch seq %d topic %q after a cut resuming at %d, epoch %q", m.Seq, m.Topic, s.Header.ResumeSeq, s.Header.Epoch)
	}
	if slices.Contains([]string{"", "0"}, s.Header.Epoch) {
		t.Fatalf("epoch %q", s.Header.Epoch)
	}
}

func TestSnapshotIsSGLangs(t *testing.T) {
	_, err := Start(testConfig(t, func(c *Config) { c.Flavor = VLLM; c.SnapshotEndpoint = "tcp://*:0" }))
	if err == nil || !strings.Contains(err.Error(), "--kv-events-snapshot-endpoint") {
		t.Fatalf("err %v, want one naming --kv-events-snapshot-endpoint", err)
	}
}
