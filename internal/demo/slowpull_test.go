package demo

import (
	"math/rand/v2"
	"os"
	"testing"

	"kvrouter/internal/cluster"
	"kvrouter/internal/cluster/clustertest"
)

// TestSlowPullsStopHints: a router with no hint flag hints B to pull a
// prefix A computed, learning from the pulls B reports; when B's pulls turn
// slow at run time (POST /admin/pull raises its simulated setup to 2 s,
// against ~0.15 s to recompute the prefix), it stops hinting within a few
// requests, while still seeing A's copy beyond B's.
func TestSlowPullsStopHints(t *testing.T) {
	bin := clustertest.Binary(t)
	ctx := testCtx(t)
	logs := t.TempDir()
	c, err := cluster.Start(ctx, cluster.Options{
		Binary: bin, Engines: 2, WorkerIDs: []string{"A", "B"},
		BlockSize: DefaultBlockSize, KVBytesPerToken: DefaultKVBytesPerToken,
		RouterFlags: [][]string{{"--allow-target-override"}},
		LogDir:      logs, KeepLogs: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	a, b := c.Engines()[0], c.Engines()[1]
	rng := rand.New(rand.NewPCG(7, 7))
	// round sends a fresh prefix to A, waits until the router sees A's
	// copy as B's source, sends it to B and reports whether B pulled.
	round := func() bool {
		t.Helper()
		body := map[string]any{"model": cluster.Model, "prompt": randomTokens(rng, 2048), "max_tokens": 2}
		if _, err := cluster.PostJSON(ctx, c.RouterURL()+pathComplete, a.ID, body, nil); err != nil {
			t.Fatal(err)
		}
		err := poll(ctx, func() (bool, error) {
			var v routeView
			_, err := cluster.PostJSON(ctx, c.RouterAdminURL()+pathRoute, b.ID, body, &v)
			r := v.HintDecision.Reason
			return err == nil && (r == "hinted" || r == "not_worth_pulling"), err
		})
		if err != nil {
			t.Fatalf("A's copy never reached the router: %v\n%s", err, dumpLogs(logs))
		}
		var out tenantCompletion
		if _, err := cluster.PostJSON(ctx, c.RouterURL()+pathComplete, b.ID, body, &out); err != nil {
			t.Fatal(err)
		}
		return out.Usage.KVRouter.Pull != nil
	}
	for i := range 3 {
		if !round() {
			t.Fatalf("round %d: fast pulls not hinted\n%s", i, dumpLogs(logs))
		}
	}
	if _, err := cluster.PostJSON(ctx, b.URL+"/admin/pull", "", map[string]any{"setup_ms": 2000}, nil); err != nil {
		t.Fatal(err)
	}
	const bound = 3
	slow := 0
	for slow <= bound && round() {
		slow++
	}
	if slow > bound {
		t.Fatalf("still hinted after %d slow pulls", slow)
	}
	for i := range 3 {
		if round() {
			t.Fatalf("hinted again %d requests after it stopped (after %d slow pulls)", i+1, slow)
		}
	}
	t.Logf("hints stopped after %d slow pulls", slow)
	if !t.Failed() {
		os.RemoveAll(logs)
	}
}
