package kvstream

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

func TestInOrderDelivery(t *testing.T) {
	for _, transport := range []string{"tcp", "ipc", "inproc"} {
		t.Run(transport, func(t *testing.T) {
			checkLeaks(t)
			ep := anyTCP
			switch transport {
			case "ipc":
				ep = "ipc://" + filepath.Join(t.TempDir(), "pub.sock")
			case "inproc":
				ep = "inproc://kvstream-inorder"
			}
			p := startPub(t, PublisherConfig{Endpoint: ep})
			if transport == "tcp" {
				ep = tcpEndpoint(p.Addr())
			}
			s, out := startSub(t, Config{Endpoint: ep})
			first, before := probe(t, pubSender(t, p, "kv"), out)
			if len(before) != 0 {
				t.Fatalf("items before the first probe: %q", before)
			}
			var want []string
			for i := range 50 {
				seq, err := p.Publish("kv", []byte(fmt.Sprint("m", i)))
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, fmt.Sprintf("msg %s %d", ep, seq))
			}
			expectItems(t, out, want...)
			if st := s.Stats(); st.Received <= 50 || st.Gaps != 0 || st.Malformed != 0 || st.Restarts != 0 {
				t.Fatalf("stats after %d probes' start: %+v", first, st)
			}
		})
	}
}

func TestGapHealedByReplay(t *testing.T) {
	checkLeaks(t)
	p := startPub(t, PublisherConfig{Endpoint: anyTCP, ReplayEndpoint: anyTCP})
	ep := tcpEndpoint(p.Addr())
	s, out := startSub(t, Config{Endpoint: ep, ReplayEndpoint: tcpEndpoint(p.ReplayAddr())})
	last, _ := probe(t, pubSender(t, p, "kv"), out)
	// Late probes may still be in flight: the dropped seq is chosen after them.
	s0 := last + 100
	p.setSkip(func(seq uint64) bool { return seq == s0+2 })
	for {
		seq, _ := p.Publish("kv", probePayload)
		if seq == s0-1 {
			break
		}
	}
	for i := range 5 {
		if _, err := p.Publish("kv", []byte(fmt.Sprint("m", i))); err != nil {
			t.Fatal(err)
		}
	}
	m := func(off uint64, suffix string) string { return fmt.Sprintf("msg %s %d%s", ep, s0+off, suffix) }
	expectItems(t, out,
		m(0, ""), m(1, ""),
		fmt.Sprintf("gap %s %d-%d", ep, s0+2, s0+2),
		m(2, " r"),
		fmt.Sprintf("healed %s %d-%d", ep, s0+2, s0+2),
		m(3, ""), m(4, ""))
	if st := s.Stats(); st.Replays != 1 || st.ReplayFailures != 0 || st.Unrecoverable != 0 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestReplayBufferTooShort(t *testing.T) {
	checkLeaks(t)
	p := startPub(t, PublisherConfig{Endpoint: anyTCP, ReplayEndpoint: anyTCP, BufferSteps: 4})
	ep := tcpEndpoint(p.Addr())
	_, out := startSub(t, Config{Endpoint: ep, ReplayEndpoint: tcpEndpoint(p.ReplayAddr())})
	last, _ := probe(t, pubSender(t, p, "kv"), out)
	s0 := last + 100
	p.setSkip(func(seq uint64) bool { return seq > s0 && seq < s0+7 })
	for {
		seq, _ := p.Publish("kv", probePayload)
		if seq == s0-1 {
			break
		}
	}
	for i := range 8 {
		if _, err := p.Publish("kv", []byte(fmt.Sprint("m", i))); err != nil {
			t.Fatal(err)
		}
	}
	// The ring holds s0+4..s0+7 when the gap s0+1..s0+6 is asked for.
	m := func(off uint64, suffix string) string { return fmt.Sprintf("msg %s %d%s", ep, s0+off, suffix) }
	expectItems(t, out,
		m(0, ""),
		fmt.Sprintf("gap %s %d-%d", ep, s0+1, s0+6),
		fmt.Sprintf("lost %s %d-%d", ep, s0+1, s0+3),
		m(4, " r"), m(5, " r"), m(6, " r"), m(7, ""))
}

func TestTopicFilterInConnectMode(t *testing.T) {
	checkLeaks(t)
	p := startPub(t, PublisherConfig{Endpoint: anyTCP})
	ep := tcpEndpoint(p.Addr())
	_, out := startSub(t, Config{Endpoint: ep, Topic: "kv"})
	probe(t, pubSender(t, p, "kv@a"), out)
	// One seq counter per publisher: filtering a topic away leaves gaps.
	a, _ := p.Publish("kv@a", []byte("a"))
	p.Publish("zz", []byte("z"))
	b, _ := p.Publish("kv@a", []byte("b"))
	expectItems(t, out,
		fmt.Sprintf("msg %s %d", ep, a),
		fmt.Sprintf("gap %s %d-%d", ep, a+1, a+1),
		fmt.Sprintf("lost %s %d-%d", ep, a+1, a+1),
		fmt.Sprintf("msg %s %d", ep, b))
}

func TestBindModeTwoPublishers(t *testing.T) {
	checkLeaks(t)
	ep := freeTCP(t)
	s, out := startSub(t, Config{Endpoint: ep, Bind: true, Backoff: Backoff{Min: 5 * time.Millisecond, Max: 20 * time.Millisecond}})
	fast := Backoff{Min: 5 * time.Millisecond, Max: 20 * time.Millisecond}
	pa := startPub(t, PublisherConfig{Endpoint: ep, Backoff: fast})
	pb := startPub(t, PublisherConfig{Endpoint: ep, Backoff: fast, FirstSeq: 500})
	const ta, tb = "kv@a:1@m", "kv@b:2@m"
	probe(t, pubSender(t, pa, ta), out)
	probe(t, pubSender(t, pb, tb), out)
	want := map[string][]uint64{}
	for i := range 20 {
		sa, _ := pa.Publish(ta, []byte(fmt.Sprint(i)))
		sb, _ := pb.Publish(tb, []byte(fmt.Sprint(i)))
		want[ta] = append(want[ta], sa)
		want[tb] = append(want[tb], sb)
	}
	got := map[string][]uint64{}
	for len(got[ta]) < 20 || len(got[tb]) < 20 {
		m := nextMessage(t, out)
		got[m.Key] = append(got[m.Key], m.Seq)
	}
	for _, k := range []string{ta, tb} {
		if fmt.Sprint(got[k]) != fmt.Sprint(want[k]) {
			t.Errorf("key %s: got seqs %v, want %v", k, got[k], want[k])
		}
	}
	if st := s.Stats(); st.Gaps != 0 || st.Restarts != 0 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestBindModePublisherRestart(t *testing.T) {
	checkLeaks(t)
	ep := freeTCP(t)
	fast := Backoff{Min: 5 * time.Millisecond, Max: 20 * time.Millisecond}
	// The SGLang epoch suffix changes with the process; the key does not.
	const topic = "kv@a:1@m"
	_, out := startSub(t, Config{Endpoint: ep, Bind: true})
	p1, err := NewPublisher(PublisherConfig{Endpoint: ep, Backoff: fast, FirstSeq: 1_000_000, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	probe(t, pubSender(t, p1, topic+epochSep+"1"), out)
	last, _ := p1.Publish(topic+epochSep+"1", []byte("x"))
	expectItems(t, out, fmt.Sprintf("msg %s %d", topic, last))
	if err := p1.Close(); err != nil {
		t.Fatal(err)
	}
	p2 := startPub(t, PublisherConfig{Endpoint: ep, Backoff: fast})
	seq, before := probe(t, pubSender(t, p2, topic+epochSep+"2"), out)
	want := []string{fmt.Sprintf("restart %s %d->%d", topic, last, seq)}
	if fmt.Sprint(before) != fmt.Sprint(want) {
		t.Fatalf("before the new publisher's first batch: got %q, want %q", before, want)
	}
}

func TestReconnectAfterPublisherRestart(t *testing.T) {
	checkLeaks(t)
	p1, err := NewPublisher(PublisherConfig{Endpoint: anyTCP, FirstSeq: 1_000_000, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ep := tcpEndpoint(p1.Addr())
	s, out := startSub(t, Config{Endpoint: ep, Backoff: Backoff{Min: 5 * time.Millisecond, Max: 40 * time.Millisecond}})
	probe(t, pubSender(t, p1, "kv"), out)
	last, _ := p1.Publish("kv", []byte("x"))
	expectItems(t, out, fmt.Sprintf("msg %s %d", ep, last))
	if err := p1.Close(); err != nil {
		t.Fatal(err)
	}
	p2 := startPub(t, PublisherConfig{Endpoint: bindTCP(ep)})
	expectItems(t, out, "reconnected "+ep)
	seq, before := probe(t, pubSender(t, p2, "kv"), out)
	want := []string{fmt.Sprintf("restart %s %d->%d", ep, last, seq)}
	if fmt.Sprint(before) != fmt.Sprint(want) {
		t.Fatalf("after reconnect: got %q, want %q", before, want)
	}
	if st := s.Stats(); st.Reconnects != 1 || st.Restarts != 1 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestDialBeforePublisherExists(t *testing.T) {
	checkLeaks(t)
	ep := freeTCP(t)
	s, out := startSub(t, Config{Endpoint: ep, Backoff: Backoff{Min: 5 * time.Millisecond, Max: 20 * time.Millisecond}})
	p := startPub(t, PublisherConfig{Endpoint: bindTCP(ep)})
	if _, before := probe(t, pubSender(t, p, "kv"), out); len(before) != 0 {
		t.Fatalf("items before the first batch: %q", before)
	}
	if st := s.Stats(); st.Reconnects != 0 {
		t.Fatalf("a first connection counted as a reconnect: %+v", st)
	}
}

func TestPublishConcurrent(t *testing.T) {
	checkLeaks(t)
	p := startPub(t, PublisherConfig{Endpoint: anyTCP})
	ep := tcpEndpoint(p.Addr())
	s, out := startSub(t, Config{Endpoint: ep})
	last, _ := probe(t, pubSender(t, p, "kv"), out)
	const writers, each = 4, 50
	done := make(chan struct{})
	for w := range writers {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range each {
				if _, err := p.Publish("kv", []byte(fmt.Sprint(w, "-", i))); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	for range writers {
		<-done
	}
	payloads := map[string]bool{}
	for len(payloads) < writers*each {
		it := nextItem(t, out)
		if isProbe(it) {
			continue
		}
		m, ok := it.(Message)
		if !ok || m.Seq <= last {
			t.Fatalf("got %s after seq %d", itemString(it), last)
		}
		last = m.Seq
		payloads[string(m.Payload)] = true
	}
	if st := s.Stats(); st.Gaps != 0 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestBindModeReplayFor(t *testing.T) {
	checkLeaks(t)
	ep := freeTCP(t)
	fast := Backoff{Min: 5 * time.Millisecond, Max: 20 * time.Millisecond}
	const topic = "kv@a:1@m"
	p := startPub(t, PublisherConfig{Endpoint: ep, ReplayEndpoint: anyTCP, Backoff: fast})
	replay := map[string]string{topic: tcpEndpoint(p.ReplayAddr())}
	_, out := startSub(t, Config{Endpoint: ep, Bind: true, ReplayFor: func(key string) string { return replay[key] }})
	last, _ := probe(t, pubSender(t, p, topic), out)
	s0 := last + 100
	p.setSkip(func(seq uint64) bool { return seq == s0+1 })
	for seq := uint64(0); seq+1 < s0; {
		seq, _ = p.Publish(topic, probePayload)
	}
	for range 3 {
		p.Publish(topic, []byte("m"))
	}
	expectItems(t, out,
		fmt.Sprintf("msg %s %d", topic, s0),
		fmt.Sprintf("gap %s %d-%d", topic, s0+1, s0+1),
		fmt.Sprintf("msg %s %d r", topic, s0+1),
		fmt.Sprintf("healed %s %d-%d", topic, s0+1, s0+1),
		fmt.Sprintf("msg %s %d", topic, s0+2))
}
