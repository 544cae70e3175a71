// This file holds the short chaos run of the default test suite (skipped
// with -short).

package chaos

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"kvrouter/internal/cluster/clustertest"
)

// TestChaosShort is a short chaos run: every fault kind at least once, no
// wrong answer, every router's index back to the engines' ground truth,
// nothing leaked.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of processes under faults; skipped with -short")
	}
	bin := clustertest.Binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := Run(ctx, Options{Binary: bin, Duration: 25 * time.Second, Seed: 3, Settle: 30 * time.Second})
	b, _ := json.Marshal(res)
	t.Logf("result: %s", b)
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK() {
		t.Fatalf("wrong outputs %d, divergence %d blocks %v, leaked %d goroutines and %d fds",
			res.WrongOutputs, res.InventoryDivergenceBlocks, res.Divergence, res.LeakedGoroutines, res.LeakedFDs)
	}
	for _, k := range kinds {
		if res.Faults[k] == 0 && !(k == FaultPeerKill && res.PeerKillsWithoutHint > 0) {
			t.Errorf("no %s fault in %v", k, res.Faults)
		}
	}
	if res.Requests < 1000 {
		t.Errorf("only %d requests", res.Requests)
	}
}
