package serve

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"kvrouter/internal/direct"
	"kvrouter/internal/kvencode"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvstream"
)

// TestEventsBindSurvivesHostileBytes replays issue 28's attacks on
// --events-bind: 73 bytes (a ZMTP greeting and a frame header announcing
// 2^62 bytes) made go-zeromq/zmq4 panic, and a 64 GiB announcement ran the
// process out of memory. The router must drop and count them, and go on
// taking engines' events.
func TestEventsBindSurvivesHostileBytes(t *testing.T) {
	h := newHarness(t)
	e := newEngine(t, testModel)
	bind := freeTCP(t)
	g := h.service(func(o *Options) {
		o.Workers = []direct.WorkerSpec{spec(t, e, "")}
		o.EventsBind = bind
	})
	waitWorkers(t, g, 1)
	greeting := make([]byte, 64)
	greeting[0], greeting[9], greeting[10], greeting[11] = 0xFF, 0x7F, 3, 1
	copy(greeting[12:], "NULL")
	readyBody := append([]byte{5}, "READY"...)
	readyBody = append(append(append(readyBody, 11), "Socket-Type"...), 0, 0, 0, 3)
	readyBody = append(readyBody, "PUB"...)
	ready := append([]byte{0x04, byte(len(readyBody))}, readyBody...)
	announce := func(n uint64) []byte { return binary.BigEndian.AppendUint64([]byte{0x02}, n) }
	attacks := [][]byte{
		append(append([]byte{}, greeting...), announce(1<<62)...),
		append(append(append([]byte{}, greeting...), ready...), announce(64<<30)...),
	}
	if len(attacks[0]) != 73 {
		t.Fatalf("the first attack is %d bytes", len(attacks[0]))
	}
	addr := strings.TrimPrefix(bind, "tcp://")
	for i, b := range attacks {
		var c net.Conn
		eventually(t, "the events socket", func() bool {
			var err error
			c, err = net.Dial("tcp", addr)
			return err == nil
		})
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		_, err := io.Copy(io.Discard, c)
		c.Close()
		if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("attack %d: the router did not drop the connection", i)
		}
	}
	want := fmt.Sprintf(`kvrouter_event_stream_total{counter="oversize",endpoint=%q} 1`, bind)
	eventually(t, "the oversize announcement counted", func() bool {
		return strings.Contains(string(get(t, g.admin()+"/metrics")), want+"\n")
	})

	eng := newPublisher(t, kvstream.PublisherConfig{Endpoint: bind, FirstSeq: 1}, kvencode.VLLMMap, "kv@"+e.hostPort()+"@"+testModel)
	toks := prompt(3000, 4)
	body := completionBody(toks, "")
	eventually(t, "events over --events-bind after the attacks", func() bool {
		eng.send(0, stored(toks, kvevents.TierDevice, ""))
		return g.route(t, body).OverlapBlocks == 4
	})
}
