package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"kvrouter/internal/kvstream"
)

// v1 is the vector V1 of docs/wire.md §3.10.
const v1 = "93cb41d954fc40200000928ba474797065ab426c6f636b53746f726564ac626c6f636b5f68617368657391cf84b146b151d55111b1706172656e745f626c6f636b5f68617368c0a9746f6b656e5f6964739401020304aa626c6f636b5f73697a6504a76c6f72615f6964c0a66d656469756da3475055a96c6f72615f6e616d65c0aa65787472615f6b65797391c0a967726f75705f69647800b26b765f63616368655f737065635f6b696e64ae66756c6c5f617474656e74696f6e84a474797065ac426c6f636b52656d6f766564ac626c6f636b5f68617368657391cf84b146b151d55111a66d656469756da3475055a967726f75705f6964780000"

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestDecodeZMQTail(t *testing.T) {
	port := strconv.Itoa(freePort(t))
	pub, err := kvstream.NewPublisher(kvstream.PublisherConfig{Endpoint: "tcp://*:" + port})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	payload, _ := hex.DecodeString(v1)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := newRootCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{"decode", "--zmq", "tcp://127.0.0.1:" + port, "--count", "2", "--topic", "kv"})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	// ZMQ drops what is published before the subscription is connected,
	// so keep publishing until the command has seen its two batches.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("decode --zmq: %v (stderr %s)", err, errOut.String())
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(lines) != 2 {
				t.Fatalf("want 2 lines, got %q", out.String())
			}
			for _, l := range lines {
				var v struct {
					Topic  string           `json:"topic"`
					Events []map[string]any `json:"events"`
				}
				if err := json.Unmarshal([]byte(l), &v); err != nil || v.Topic != "kv-events" || len(v.Events) != 2 {
					t.Fatalf("line %q: %+v %v", l, v, err)
				}
			}
			return
		case <-tick.C:
			if _, err := pub.Publish("kv-events", payload); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("decode --zmq did not finish")
		}
	}
}
