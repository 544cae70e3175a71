package kvstream

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable time source.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestKeysBounded: a bind-mode socket tracks at most MaxKeys publisher
// keys; a stranger inventing topics gets its messages dropped and counted,
// with one warning per interval, and keys idle for KeyIdle make room,
// each reported Unrecoverable.
func TestKeysBounded(t *testing.T) {
	checkLeaks(t)
	ep := freeTCP(t)
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	var logs syncBuffer
	const maxKeys, flood = 50, 2000
	s, out := startSub(t, Config{Endpoint: ep, Bind: true, MaxKeys: maxKeys, KeyIdle: time.Minute, Now: clk.Now,
		Logger: slogTo(&logs)})
	p := startPub(t, PublisherConfig{Endpoint: ep, Backoff: Backoff{Min: 5 * time.Millisecond, Max: 20 * time.Millisecond}})
	probe(t, pubSender(t, p, "probe"), out) // one key
	for i := range flood {
		p.Publish(fmt.Sprintf("kv@10.0.0.1:%d@m", i), []byte("x"))
	}
	delivered := 0
	for delivered < maxKeys-1 {
		if m, ok := nextItem(t, out).(Message); ok && strings.HasPrefix(m.Key, "kv@") {
			delivered++
		}
	}
	waitFor(t, "the flood", func() bool { return s.Stats().KeysRefused == flood-(maxKeys-1) })
	if n := logs.count("too many publisher keys"); n != 1 {
		t.Fatalf("%d warnings about refused keys on a still clock, want 1", n)
	}
	// Every key goes idle; the next new key makes them all forgotten.
	clk.advance(2 * time.Minute)
	p.Publish("kv@10.0.0.2:1@m", []byte("x"))
	forgotten := map[string]bool{}
	for {
		it := nextItem(t, out)
		if u, ok := it.(Unrecoverable); ok {
			forgotten[u.Key] = true
			continue
		}
		if m, ok := it.(Message); ok && m.Key == "kv@10.0.0.2:1@m" {
			break
		}
		if !isProbe(it) {
			t.Fatalf("unexpected %s", itemString(it))
		}
	}
	if len(forgotten) != maxKeys || !forgotten["probe"] {
		t.Fatalf("forgot %d keys (probe among them: %v), want %d", len(forgotten), forgotten["probe"], maxKeys)
	}
	if st := s.Stats(); st.KeysForgotten != maxKeys {
		t.Fatalf("stats %+v", st)
	}
}

// TestAcceptKeepsNoStateForStrangers: keys Accept refuses cost no
// tracking state, whatever their number.
func TestAcceptKeepsNoStateForStrangers(t *testing.T) {
	checkLeaks(t)
	ep := freeTCP(t)
	var mu sync.Mutex
	asked := map[string]int{}
	accept := func(key string) bool {
		mu.Lock()
		defer mu.Unlock()
		asked[key]++
		return key == "probe"
	}
	s, out := startSub(t, Config{Endpoint: ep, Bind: true, Accept: accept, MaxKeys: 10})
	p := startPub(t, PublisherConfig{Endpoint: ep, Backoff: Backoff{Min: 5 * time.Millisecond, Max: 20 * time.Millisecond}})
	probe(t, pubSender(t, p, "probe"), out)
	const flood = 20000
	for i := range flood {
		p.Publish(fmt.Sprintf("kv@10.0.0.1:%d@m", i), []byte("x"))
	}
	waitFor(t, "the flood", func() bool { return s.Stats().Unaccepted == flood })
	p.Publish("probe", []byte("after"))
	// The probe key's seq jumped over the flood's (one publisher, one
	// counter): a gap, then the message.
	for {
		it := nextItem(t, out)
		if m, ok := it.(Message); ok && !isProbe(it) {
			if string(m.Payload) != "after" || m.Key != "probe" {
				t.Fatalf("after the flood got %+v", m)
			}
			break
		}
	}
	mu.Lock()
	probes := asked["probe"]
	mu.Unlock()
	if st := s.Stats(); st.KeysRefused != 0 || probes != 1 {
		t.Fatalf("stats %+v; Accept asked %d times about a key it took, want once", st, probes)
	}
}

func slogTo(w *syncBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
