package direct

import (
	"fmt"
	"testing"
	"time"

	"kvrouter/internal/index"
	"kvrouter/internal/kvencode"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvstream"
	"kvrouter/internal/router"
	"kvrouter/internal/runner/runnertest"
	"kvrouter/internal/runnerprobe"
)

// ownerState renders src as the router holds it: ready or not, and its
// block count.
func ownerState(r *router.Router, src index.Source) string {
	for _, si := range r.Inventory() {
		if si.Source != src {
			continue
		}
		n := 0
		for _, hs := range si.Tiers {
			n += len(hs)
		}
		if si.Ready {
			return fmt.Sprintf("ready %d", n)
		}
		return fmt.Sprintf("not-ready %d", n)
	}
	return "unknown"
}

// A --worker with control= has its runner probed as the agent probes its
// own: the cache owner's inventory outlives an engine restart while the
// runner answers with its epoch, is no hint source while the runner is
// silent, is dropped once it has been silent for --owner-ttl, and is reset
// when the runner answers with a new epoch.
func TestFleetProbesRunners(t *testing.T) {
	events, replay := freeEndpoint(t), freeEndpoint(t)
	port := runnertest.FreePort(t)
	var p *kvstream.Publisher
	startEngine := func() {
		t.Helper()
		if p != nil {
			p.Close()
		}
		var err error
		if p, err = kvstream.NewPublisher(kvstream.PublisherConfig{Endpoint: bindAll(events), ReplayEndpoint: bindAll(replay), Logger: quiet()}); err != nil {
			t.Fatal(err)
		}
	}
	startEngine()
	t.Cleanup(func() { p.Close() })
	enc := kvencode.Encoder{Format: kvencode.SGLangMap}
	publish := func(evs ...kvevents.Event) {
		t.Helper()
		b, err := enc.Encode(kvevents.Batch{TS: 1, Events: evs})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Publish("kv", b); err != nil {
			t.Fatal(err)
		}
	}
	runnerStore := func(toks []uint32) kvevents.Event {
		ev := stored(toks, kvevents.TierExternal, "EXTERNAL")
		ev.Ownership = kvevents.OwnedByRunner
		return ev
	}
	rn := runnertest.Serve(t, nil, port)
	r := runFleetWith(t, fmt.Sprintf("url=http://w:1,id=w,model=m,engine=sglang,type=aggregated,block_size=%d,events=%s,replay=%s,control=tcp://127.0.0.1:%d",
		testBS, events, replay, port), "", func(f *Fleet) {
		f.RunnerProbe = runnerprobe.Config{Interval: 20 * time.Millisecond, TTL: 500 * time.Millisecond}
	})
	owner := index.CacheOwner(flagOwner("w", 0))
	expect := func(what, want string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ownerState(r, owner) != want; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the owner is %s, want %s", what, ownerState(r, owner), want)
			}
		}
	}
	publish(runnerStore(prompt(1, 2)))
	expect("the runner's blocks", "ready 2")

	// A new engine process: the runner lives, its blocks stay.
	startEngine()
	waitOverlap(t, r, prompt(7, 1), 1, func() { publish(stored(prompt(7, 1), kvevents.TierDevice, "GPU")) })
	expect("the owner across the engine restart", "ready 2")

	rn.Stop()
	expect("the owner while its runner is silent", "not-ready 2")
	rn = runnertest.Serve(t, rn.R, port)
	expect("the owner once its runner answers again", "ready 2")

	// A new runner process holds none of the old one's blocks.
	rn.Stop()
	rn = runnertest.Serve(t, nil, port)
	expect("the owner of the new runner", "ready 0")
	publish(runnerStore(prompt(20, 3)))
	expect("the new runner's blocks", "ready 3")

	// Silent past the TTL: dropped.
	rn.Stop()
	expect("the owner past the TTL", "not-ready 0")
}
