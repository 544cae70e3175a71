package chaos

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"kvrouter/internal/bus"
	"kvrouter/internal/cluster"
	"kvrouter/internal/cluster/clustertest"
	"kvrouter/internal/discovery"
	"kvrouter/internal/mocker"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// convergeBound is how long after the load stops every router's index
// must agree with the engines once a NATS server was lost: relayed
// messages lost with the server show as cursor gaps at the agents' next
// heartbeat and are healed by a snapshot.
const convergeBound = 15 * time.Second

// lossLease is the agents' lease in TestNATSServerLoss: the default's
// order (10 s), not the chaos run's 3 s. An agent whose server stops is
// back on another after nats.go's reconnect wait (2 s), and a JetStream
// stream whose leader was there elects another first, which on a busy
// 2-core machine took longer than a 3 s lease allows.
const lossLease = 6 * time.Second

// TestNATSServerLoss: three NATS servers joined by routes, three engines
// with their agents and two routers on different servers. One server stops
// under load: both routers go on routing with no client error, keep every
// worker registered for two leases and more, and their indexes converge to
// the engines' ground truth within convergeBound once the load stops.
func TestNATSServerLoss(t *testing.T) {
	bin := clustertest.Binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{
		Binary: bin, Engines: 3, NATSServers: 3,
		BlockSize: blockSize, GPUBlocks: gpuBlocks, RunnerBlocks: runnerBlocks, Speedup: 20,
		AgentFlags:  []string{"--lease", lossLease.String()},
		RouterFlags: [][]string{routerFlags(), routerFlags()},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	}()
	// The registrations are held by three servers.
	b, err := bus.Open(ctx, bus.Options{URL: c.NATSURL(), Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := discovery.OpenNATS(ctx, b.JS, "", 3*time.Second, nil)
	if err == nil {
		var n int
		if n, err = reg.Replicas(ctx); err == nil && n != discovery.ClusterReplicas {
			t.Errorf("the registrations bucket has %d replicas, want %d", n, discovery.ClusterReplicas)
		}
	}
	b.Close()
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	var routers, admins []string
	for _, r := range c.Routers() {
		routers = append(routers, r.URL)
		admins = append(admins, r.Admin)
	}
	ref := mocker.NewReference(mocker.Config{BlockSize: blockSize})
	tl := &tally{errors: map[string]int{}}
	work := newWorkload(5, docs, blockSize)
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for id := range 4 {
		cl := &client{id: id, routers: routers, work: work, ref: ref, hc: hc, tally: tl, rng: rand.New(rand.NewPCG(5, uint64(id)))}
		wg.Go(func() { cl.run(loadCtx) })
	}
	sleep(ctx, 2*time.Second)
	// Server 0 carries router 0 and engine A's agent.
	if err := c.StopNATS(0); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	for time.Since(stopped) < 2*lossLease+time.Second {
		for _, r := range admins {
			var v struct {
				Workers []struct {
					ID string `json:"id"`
				} `json:"workers"`
			}
			b, err := cluster.Get(ctx, r+"/debug/workers")
			if err == nil {
				err = json.Unmarshal(b, &v)
			}
			if err != nil || len(v.Workers) != 3 {
				t.Fatalf("%s lists %d workers %.1fs after the server stopped (%v)", r, len(v.Workers), time.Since(stopped).Seconds(), err)
			}
		}
		sleep(ctx, 200*time.Millisecond)
	}
	stopLoad()
	wg.Wait()
	tl.mu.Lock()
	t.Logf("%d requests, %d errors %v, %d wrong", tl.requests, len(tl.errors), tl.errors, tl.wrong)
	if len(tl.errors) > 0 || tl.wrong > 0 || tl.ok < 100 {
		t.Errorf("under the server loss: %d answers right, %d wrong, errors %v", tl.ok, tl.wrong, tl.errors)
	}
	tl.mu.Unlock()
	loadStopped := time.Now()
	d, err := settle(ctx, c, convergeBound)
	took := time.Since(loadStopped)
	if err != nil || d.Blocks != 0 {
		t.Fatalf("after %v: %d blocks diverge (%v): %v", took, d.Blocks, err, d.Detail)
	}
	t.Logf("indexes agree with the engines %v after the load stopped (%v after the server stopped)",
		took.Round(time.Millisecond), time.Since(stopped).Round(time.Millisecond))
	// The server comes back and the cluster takes it in.
	if err := c.StartNATS(0); err != nil {
		t.Fatal(err)
	}
}
