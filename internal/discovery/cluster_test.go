package discovery

import (
	"context"
	"testing"
	"time"

	"kvrouter/internal/bus"
)

// TestBucketReplicas: the bucket is held by three servers of a three-server
// cluster, and a registration survives the server its agent wrote through,
// read by a client of another; a single server holds it alone.
func TestBucketReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-server NATS cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	single, err := bus.Open(ctx, bus.Options{Name: "single"})
	if err != nil {
		t.Fatal(err)
	}
	defer single.Close()
	n, err := OpenNATS(ctx, single.JS, "", 2*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := n.Replicas(ctx); err != nil || r != 1 {
		t.Fatalf("single server: %d replicas (%v), want 1", r, err)
	}

	c, err := bus.StartCluster(bus.ClusterOptions{Servers: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	open := func(i int) (*bus.Bus, *NATS) {
		b, err := bus.Open(ctx, bus.Options{URL: c.URL(i), Name: "client"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		n, err := OpenNATS(ctx, b.JS, "", time.Minute, nil)
		if err != nil {
			t.Fatal(err)
		}
		return b, n
	}
	b0, writer := open(0)
	_, reader := open(2)
	if r, err := writer.Replicas(ctx); err != nil || r != ClusterReplicas {
		t.Fatalf("three servers: %d replicas (%v), want %d", r, err, ClusterReplicas)
	}
	if err := writer.Put(ctx, worker("w1")); err != nil {
		t.Fatal(err)
	}
	ch, err := reader.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for c := next(t, ch); c.Op != OpSynced; c = next(t, ch) {
	}
	c.Stop(0)
	// The writer's client fails over; the registration is still there for
	// the reader, and the writer's next refresh goes through.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := writer.Put(ctx, worker("w2")); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("put after the server stopped: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := b0.Conn.ConnectedUrl(); got == c.URL(0) {
		t.Fatalf("writer still on %s", got)
	}
	stopped := time.Now()
	seen := map[string]bool{}
	for !seen["w2"] {
		select {
		case c := <-ch:
			if c.Op == OpPut {
				seen[c.ID] = true
			} else if c.Op == OpDelete {
				t.Fatalf("%s deleted", c.ID)
			}
		case <-time.After(40 * time.Second):
			t.Fatal("the watch saw no w2")
		}
	}
	t.Logf("the watch saw the put %v after the server stopped", time.Since(stopped))
	kv := reader.bucket()
	if _, err := kv.Get(ctx, keyFor("w1")); err != nil {
		t.Fatalf("w1 after the server stopped: %v", err)
	}
	if err := c.Start(0); err != nil {
		t.Fatal(err)
	}
}

// TestConcurrentOpen: agents and routers starting together all open the
// replicated bucket (the creations that lose the race get no answer from
// the server and are retried).
func TestConcurrentOpen(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-server NATS cluster")
	}
	c, err := bus.StartCluster(bus.ClusterOptions{Servers: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make(chan error, 6)
	for i := range 6 {
		go func() {
			b, err := bus.Open(ctx, bus.Options{URL: c.URL(i % 3), Name: "client"})
			if err != nil {
				errs <- err
				return
			}
			defer b.Close()
			_, err = OpenNATS(ctx, b.JS, "", 3*time.Second, nil)
			errs <- err
		}()
	}
	for range 6 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
