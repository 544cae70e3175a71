package runner

import (
	"context"
	"net"
	"testing"
	"time"
)

// A ping answers the runner's epoch without a secret, and another runner
// answers another epoch; nothing answers where no runner listens.
func TestPing(t *testing.T) {
	ctx := context.Background()
	a := startSource(t, 4, TCPConfig{Secret: []byte("s3cret")}, 1)
	b := startSource(t, 4, TCPConfig{})
	ea, err := Ping(ctx, a.endpoint, time.Second)
	if err != nil || ea != a.r.Epoch() || ea == 0 {
		t.Fatalf("ping a: %d, %v; want its epoch %d", ea, err, a.r.Epoch())
	}
	if again, err := Ping(ctx, a.endpoint, time.Second); err != nil || again != ea {
		t.Fatalf("ping a again: %d, %v; want %d", again, err, ea)
	}
	if eb, err := Ping(ctx, b.endpoint, time.Second); err != nil || eb == ea {
		t.Fatalf("ping b: %d, %v; want an epoch other than a's %d", eb, err, ea)
	}
	// The ping leaves no connection behind, and fetches still work.
	waitFor(t, "the ping's connection closed", func() bool { return a.srv.Stats().Conns == 0 })

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "tcp://" + ln.Addr().String()
	ln.Close()
	if _, err := Ping(ctx, dead, time.Second); err == nil {
		t.Fatal("ping of a closed port answered")
	}
	// A listener that never answers: the timeout ends the ping.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	start := time.Now()
	if _, err := Ping(ctx, "tcp://"+silent.Addr().String(), 100*time.Millisecond); err == nil || time.Since(start) > 2*time.Second {
		t.Fatalf("ping of a silent peer: %v after %v", err, time.Since(start))
	}
	if _, err := Ping(ctx, "http://x:1", time.Second); err == nil {
		t.Fatal("ping of a non-tcp endpoint accepted")
	}
}
