// This file holds Divergence: where the routers' indexes and the engines' ground truth disagree.
package cluster

import (
	"context"
	"fmt"
	"slices"
)

// maxDetail bounds the disagreements Divergence describes.
const maxDetail = 8

// Divergence is where the routers' indexes and the engines' ground truth
// disagree, counted in blocks held on one side only.
type Divergence struct {
	Blocks int
	// Detail describes the first disagreements, one line each.
	Detail []string
}

// engineInventory is a mocker's GET /admin/inventory.
type engineInventory struct {
	Ranks []struct {
		DPRank int      `json:"dp_rank"`
		GPU    []uint64 `json:"gpu"`
		Runner []uint64 `json:"runner"`
	} `json:"ranks"`
}

// routerInventory is a router's GET /debug/inventory.
type routerInventory struct {
	Sources []struct {
		Worker string              `json:"worker"`
		DPRank *int                `json:"dp_rank"`
		Owner  string              `json:"owner"`
		Blocks map[string][]uint64 `json:"blocks"`
	} `json:"sources"`
}

// ownersView maps the cache owners of GET /debug/workers to their rank.
type ownersView struct {
	Workers []struct {
		ID     string `json:"id"`
		Owners []struct {
			ID     string `json:"id"`
			DPRank *int   `json:"dp_rank"`
		} `json:"owners"`
	} `json:"workers"`
}

type rankKey struct {
	worker string
	rank   int
}

// Divergence compares, for every router, each engine rank's GPU blocks
// with the router's source for the rank (every tier), and the rank's
// runner blocks with the router's cache owner of the rank; blocks of
// sources that belong to no engine rank count too. Engines must be idle
// and the cluster settled for the answer to mean anything.
func (c *Cluster) Divergence(ctx context.Context) (Divergence, error) {
	truth := map[rankKey][2][]uint64{} // GPU, runner
	for _, e := range c.Engines() {
		var inv engineInventory
		if err := getJSON(ctx, e.URL+"/admin/inventory", &inv); err != nil {
			return Divergence{}, fmt.Errorf("cluster: engine %s: %w", e.ID, err)
		}
		for _, r := range inv.Ranks {
			truth[rankKey{e.ID, r.DPRank}] = [2][]uint64{r.GPU, r.Runner}
		}
	}
	var d Divergence
	for _, r := range c.Routers() {
		var inv routerInventory
		var ws ownersView
		if err := getJSON(ctx, r.Admin+"/debug/inventory", &inv); err != nil {
			return Divergence{}, fmt.Errorf("cluster: router %s: %w", r.URL, err)
		}
		if err := getJSON(ctx, r.Admin+"/debug/workers", &ws); err != nil {
			return Divergence{}, fmt.Errorf("cluster: router %s: %w", r.URL, err)
		}
		ownerOf := map[string]rankKey{}
		for _, w := range ws.Workers {
			for _, o := range w.Owners {
				if o.DPRank != nil {
					ownerOf[o.ID] = rankKey{w.ID, *o.DPRank}
				}
			}
		}
		belief := map[rankKey][2][]uint64{}
		var stray []string
		for _, s := range inv.Sources {
			var all []uint64
			for _, hs := range s.Blocks {
				all = append(all, hs...)
			}
			slices.Sort(all)
			all = slices.Compact(all)
			k, side := rankKey{}, 0
			switch {
			case s.Owner != "":
				var ok bool
				if k, ok = ownerOf[s.Owner]; !ok {
					k = rankKey{worker: "owner " + s.Owner}
				}
				side = 1
			case s.DPRank != nil:
				k = rankKey{s.Worker, *s.DPRank}
			}
			if _, ok := truth[k]; !ok && len(all) > 0 {
				stray = append(stray, fmt.Sprintf("%s: %s/%d holds %d blocks and is no engine rank", r.URL, k.worker, k.rank, len(all)))
				d.Blocks += len(all)
				continue
			}
			b := belief[k]
			b[side] = all
			belief[k] = b
		}
		d.Detail = append(d.Detail, stray...)
		for k, t := range truth {
			b := belief[k]
			for side, what := range [2]string{"GPU", "runner"} {
				only, missing := difference(b[side], t[side]), difference(t[side], b[side])
				if n := len(only) + len(missing); n > 0 {
					d.Blocks += n
					d.Detail = append(d.Detail, fmt.Sprintf("%s: %s/%d %s: %d blocks the router believes and the engine does not hold, %d the other way",
						r.URL, k.worker, k.rank, what, len(only), len(missing)))
				}
			}
		}
	}
	slices.Sort(d.Detail)
	if len(d.Detail) > maxDetail {
		d.Detail = append(d.Detail[:maxDetail], fmt.Sprintf("and %d more", len(d.Detail)-maxDetail))
	}
	return d, nil
}

// difference lists the elements of sorted a missing from sorted b.
func difference(a, b []uint64) []uint64 {
	var out []uint64
	j := 0
	for _, x := range a {
		for j < len(b) && b[j] < x {
			j++
		}
		if j == len(b) || b[j] != x {
			out = append(out, x)
		}
	}
	return out
}
