// This file holds GET /debug/inventory: every source's blocks by engine block hash.

package admin

import (
	"net/http"

	"kvrouter/internal/frontdoor"
)

type inventorySourceJSON struct {
	Worker      string              `json:"worker,omitempty"`
	DPRank      *int                `json:"dp_rank,omitempty"`
	Owner       string              `json:"owner,omitempty"`
	Ready       bool                `json:"ready"`
	Approximate bool                `json:"approximate,omitempty"`
	Blocks      map[string][]uint64 `json:"blocks"` // by tier name, sorted
}

type inventoryJSON struct {
	Sources []inventorySourceJSON `json:"sources"`
}

// debugInventory lists every source's blocks as the router's index holds
// them, by the engine block hashes of their events, so that a check can
// compare them with what the engines hold. It walks the whole index.
func (v *Views) debugInventory(w http.ResponseWriter, _ *http.Request) {
	out := inventoryJSON{Sources: []inventorySourceJSON{}}
	for _, si := range v.Router.Inventory() {
		s := inventorySourceJSON{Worker: si.Worker, Owner: si.Source.Owner, Ready: si.Ready, Approximate: si.Approximate,
			Blocks: map[string][]uint64{}}
		if !si.Source.IsOwner() {
			rank := si.Source.Rank
			s.DPRank = &rank
		}
		for t, hashes := range si.Tiers {
			s.Blocks[t.String()] = hashes
		}
		out.Sources = append(out.Sources, s)
	}
	frontdoor.WriteJSON(w, http.StatusOK, out)
}
