package kvstream

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"kvrouter/internal/zmtp"
)

// replayFramings are the replay answers seen in the wild, as functions of
// a batch's seq and payload (the end marker has seq endSeq and no payload).
var replayFramings = map[string]func(seq uint64, payload []byte) [][]byte{
	// vLLM's, SPEC 2.1's, our Publisher's.
	`["", seq, payload]`: func(seq uint64, p []byte) [][]byte { return [][]byte{{}, seq8(seq), p} },
	`[topic, seq, payload]`: func(seq uint64, p []byte) [][]byte {
		return [][]byte{[]byte("kv@h:1@m"), seq8(seq), p}
	},
	`["", topic, seq, payload]`: func(seq uint64, p []byte) [][]byte {
		return [][]byte{{}, []byte("kv@h:1@m"), seq8(seq), p}
	},
}

// replayServer answers every replay request on a ROUTER of its own with
// the batches from the asked seq to upto, payload "replayed", in framing.
func replayServer(t *testing.T, upto func() uint64, framing func(uint64, []byte) [][]byte) string {
	t.Helper()
	router, err := zmtp.New(zmtp.Router, zmtp.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := router.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			req, err := router.Recv(ctx)
			if err != nil {
				return
			}
			id := req.Frames[0]
			start, err := ParseReplayRequest(req.Frames[1:])
			if err != nil {
				t.Errorf("replay request: %v", err)
				return
			}
			for seq := start; seq <= upto(); seq++ {
				router.Send(ctx, append([][]byte{id}, framing(seq, []byte("replayed"))...))
			}
			router.Send(ctx, append([][]byte{id}, framing(endSeq, []byte{})...))
		}
	})
	t.Cleanup(func() {
		cancel()
		router.Close()
		wg.Wait()
	})
	return "tcp://" + router.Addr().String()
}

// TestReplayFramings: a gap heals whichever framing the publisher's replay
// endpoint answers in, and nothing is counted malformed.
func TestReplayFramings(t *testing.T) {
	for name, framing := range replayFramings {
		t.Run(name, func(t *testing.T) {
			checkLeaks(t)
			p := startPub(t, PublisherConfig{Endpoint: anyTCP})
			ep := tcpEndpoint(p.Addr())
			var s0 uint64
			var mu sync.Mutex
			replay := replayServer(t, func() uint64 { mu.Lock(); defer mu.Unlock(); return s0 + 2 }, framing)
			s, out := startSub(t, Config{Endpoint: ep, ReplayEndpoint: replay, ReplayTimeout: time.Minute})
			last, _ := probe(t, pubSender(t, p, "kv"), out)
			mu.Lock()
			s0 = last + 100
			mu.Unlock()
			p.setSkip(func(seq uint64) bool { return seq == s0+1 || seq == s0+2 })
			publishUpTo(t, p, s0)
			for range 4 { // s0, s0+1 and s0+2 kept off the wire, s0+3
				p.Publish("kv", []byte("live"))
			}
			var got []string
			for len(got) < 6 {
				it := nextItem(t, out)
				if isProbe(it) {
					continue
				}
				str := itemString(it)
				if m, ok := it.(Message); ok && m.Replayed {
					str += " " + string(m.Payload)
				}
				got = append(got, str)
			}
			want := []string{
				fmt.Sprintf("msg %s %d", ep, s0),
				fmt.Sprintf("gap %s %d-%d", ep, s0+1, s0+2),
				fmt.Sprintf("msg %s %d r replayed", ep, s0+1),
				fmt.Sprintf("msg %s %d r replayed", ep, s0+2),
				fmt.Sprintf("healed %s %d-%d", ep, s0+1, s0+2),
				fmt.Sprintf("msg %s %d", ep, s0+3),
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("items:\n got %q\nwant %q", got, want)
			}
			if st := s.Stats(); st.Malformed != 0 || st.Unrecoverable != 0 || st.ReplayFailures != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// syncBuffer is a log sink for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) count(sub string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Count(s.b.String(), sub)
}

// TestMalformedReplayWarnedOnce: a publisher whose replay answers we
// cannot read is logged at warn level once, however many gaps it has.
func TestMalformedReplayWarnedOnce(t *testing.T) {
	checkLeaks(t)
	p := startPub(t, PublisherConfig{Endpoint: anyTCP})
	ep := tcpEndpoint(p.Addr())
	// Batches framed in no way we read, then a good end marker.
	bad := func(seq uint64, pl []byte) [][]byte {
		if seq == endSeq {
			return EncodeReplayEnd()
		}
		return [][]byte{[]byte("x"), []byte("kv"), seq8(seq), pl}
	}
	var upto uint64
	var mu sync.Mutex
	replay := replayServer(t, func() uint64 { mu.Lock(); defer mu.Unlock(); return upto }, bad)
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, out := startSub(t, Config{Endpoint: ep, ReplayEndpoint: replay, ReplayTimeout: time.Minute, Logger: log})
	last, _ := probe(t, pubSender(t, p, "kv"), out)
	s0 := last + 100
	const gaps = 3
	p.setSkip(func(seq uint64) bool { return seq > s0 && seq <= s0+2*gaps && (seq-s0)%2 == 1 })
	mu.Lock()
	upto = s0 + 2*gaps
	mu.Unlock()
	publishUpTo(t, p, s0)
	p.Publish("kv", []byte("live")) // s0
	for range gaps {
		// One gap at a time, each its own replay.
		p.Publish("kv", []byte("live"))
		p.Publish("kv", []byte("live"))
		for {
			if _, ok := nextItem(t, out).(Unrecoverable); ok {
				break
			}
		}
	}
	if n := logs.count("dropped malformed replay replies"); n != 1 {
		t.Fatalf("%d warnings for one publisher's malformed replies, want 1:\n%s", n, logs.b.String())
	}
	if st := s.Stats(); st.BadDelimiter < gaps || st.Replays != gaps {
		t.Fatalf("stats %+v", st)
	}
}
