// This file holds the engine's ground truth: the blocks each rank holds, as GET /admin/inventory lists them.
package mocker

import (
	"net/http"
	"slices"
)

// pathAdminInventory lists what every rank holds.
const pathAdminInventory = "/admin/inventory"

// RankInventory is what one DP rank holds, by engine block hash (the
// hashes its KV events name), each list sorted.
type RankInventory struct {
	DPRank int `json:"dp_rank"`
	// GPU lists the blocks cached in the rank's GPU pool.
	GPU []uint64 `json:"gpu"`
	// Runner lists the blocks the rank's KV cache runner holds whole:
	// every TP shard holds its slice.
	Runner []uint64 `json:"runner"`
}

// Inventory is GET /admin/inventory's answer.
type Inventory struct {
	Ranks []RankInventory `json:"ranks"`
}

// Inventory lists what every rank holds now.
func (e *Engine) Inventory() Inventory {
	var out Inventory
	for _, r := range e.ranks {
		out.Ranks = append(out.Ranks, r.inventory())
	}
	return out
}

func (r *rank) inventory() RankInventory {
	ri := RankInventory{DPRank: r.id, GPU: []uint64{}, Runner: []uint64{}}
	r.mu.Lock()
	for k := range r.sched.pool.index {
		ri.GPU = append(ri.GPU, k)
	}
	r.mu.Unlock()
	held := map[uint64]int{}
	for _, run := range r.tier.runners {
		for _, k := range run.Keys() {
			held[k]++
		}
	}
	for k, n := range held {
		if n == len(r.tier.runners) {
			ri.Runner = append(ri.Runner, k)
		}
	}
	slices.Sort(ri.GPU)
	slices.Sort(ri.Runner)
	return ri
}

func (e *Engine) handleInventory(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, e.Inventory())
}
