package kvstream

import (
	"fmt"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
)

// Interop with go-zeromq/zmq4, which other Go engine simulators use. The
// tests in raw_test.go and shard_test.go play zmq4 PUB, ROUTER and DEALER
// peers against our SUB, DEALER and ROUTER; these play a zmq4 SUB against
// our PUB. zmq4 speaks ZMTP 3.0: it subscribes with messages, not the 3.1
// SUBSCRIBE command.
func TestZMQ4Subscriber(t *testing.T) {
	for _, subBinds := range []bool{false, true} {
		t.Run(fmt.Sprintf("subscriber binds %v", subBinds), func(t *testing.T) {
			checkLeaks(t)
			var p *Publisher
			var sub zmq4.Socket
			if subBinds {
				ep := freeTCP(t)
				sub = rawSocket(t, zmq4.NewSub, ep)
				p = startPub(t, PublisherConfig{Endpoint: ep, Backoff: fastBackoff})
			} else {
				p = startPub(t, PublisherConfig{Endpoint: anyTCP})
				sub = rawSocket(t, zmq4.NewSub, "")
				if err := sub.Dial(tcpEndpoint(p.Addr())); err != nil {
					t.Fatal(err)
				}
			}
			if err := sub.SetOption(zmq4.OptionSubscribe, "kv@"); err != nil {
				t.Fatal(err)
			}
			got := make(chan zmq4.Msg, 1024)
			go func() {
				for {
					m, err := sub.Recv()
					if err != nil {
						return
					}
					got <- m
				}
			}()
			// The slow joiner: publish until a batch gets through.
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			var first zmq4.Msg
			for deadline := time.After(waitLimit); first.Frames == nil; {
				select {
				case first = <-got:
				case <-tick.C:
					p.Publish("zz", []byte("filtered"))
					p.Publish("kv@a", probePayload)
				case <-deadline:
					t.Fatal("the zmq4 subscriber received nothing")
				}
			}
			seq, _ := p.Publish("kv@a", []byte("last"))
			for m := first; ; {
				topic, s, payload, err := ParseMessage(m.Frames)
				if err != nil || string(topic) != "kv@a" {
					t.Fatalf("zmq4 subscriber got %q: %v", m.Frames, err)
				}
				if s == seq && string(payload) == "last" {
					return
				}
				select {
				case m = <-got:
				case <-time.After(waitLimit):
					t.Fatal("the zmq4 subscriber did not get the last batch")
				}
			}
		})
	}
}
