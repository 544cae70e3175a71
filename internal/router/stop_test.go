package router

import (
	"fmt"
	"testing"

	"kvrouter/internal/index"
	"kvrouter/internal/kvevents"
)

// An agent that stops cleanly sends its gone messages on the event plane,
// then deletes its registration (docs/wire.md §9.6): two paths, which a
// router's follower and discovery watch may handle in either order. Gone
// is only sent for sources the deregistration drops anyway (worker ranks)
// or that the agent already withdrew (owners not ready), so the router
// ends the same either way: the ready owner detached with its blocks, a
// hint source for the TTL; the withdrawn one detached, empty, not ready.
func TestAgentStopEitherOrder(t *testing.T) {
	state := func(goneFirst bool) string {
		r := newRouter(t, nil)
		f := newFleet(t, r, agg("a", 2))
		s := f.sinks["a"]
		for rank := range 2 {
			f.store("a", index.WorkerRank("a", rank), storeOp(tokens(1, 3), "", kvevents.TierDevice))
			f.store("a", index.CacheOwner(fmt.Sprintf("owner-a-%d", rank)), storeOp(tokens(1, 2), "", kvevents.TierExternal))
		}
		// Owner 1's runner stopped answering: the agent withdrew it.
		s.Reset(index.CacheOwner("owner-a-1"))
		stop := []index.Source{index.WorkerRank("a", 0), index.WorkerRank("a", 1), index.CacheOwner("owner-a-1")}
		if goneFirst {
			for _, src := range stop {
				s.Gone(src)
			}
			r.Remove("a", t0)
		} else {
			r.Remove("a", t0)
			for _, src := range stop {
				s.Gone(src) // a follower still draining: its sink no longer counts
			}
		}
		r.RefreshSizes()
		ws, detached := r.View()
		out := fmt.Sprintf("workers %d;", len(ws))
		for _, o := range detached {
			out += fmt.Sprintf(" %s ready=%v blocks=%v expires=%v;", o.ID, o.Ready, o.Blocks, o.ExpiresAt.Sub(t0))
		}
		return out
	}
	first, last := state(true), state(false)
	if first != last {
		t.Fatalf("gone first: %s\nderegistered first: %s", first, last)
	}
	want := fmt.Sprintf("workers 0; owner-a-0 ready=true blocks=%v expires=1m0s; owner-a-1 ready=false blocks=%v expires=1m0s;",
		Blocks{kvevents.TierExternal: 2}, Blocks{})
	if first != want {
		t.Fatalf("state %s\nwant %s", first, want)
	}
}
