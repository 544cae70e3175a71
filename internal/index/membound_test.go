package index

import (
	"fmt"
	"testing"

	"kvrouter/internal/kvevents"
)

func TestDefaultMaxBytes(t *testing.T) {
	tests := []struct {
		available int64
		gcPercent int
		want      int64
	}{
		{24 << 30, 400, 24 << 30 / 10},
		{24 << 30, 100, 24 << 30 / 4},
		{24 << 30, -1, 24 << 30 / 4}, // GOGC=off
		{16 << 30, 0, 8 << 30},
		{0, 400, 0}, // unknown: unbounded
		{3, 400, 1},
	}
	for _, tt := range tests {
		if got := DefaultMaxBytes(tt.available, tt.gcPercent); got != tt.want {
			t.Errorf("DefaultMaxBytes(%d, %d) = %d, want %d", tt.available, tt.gcPercent, got, tt.want)
		}
	}
}

func TestEvictCount(t *testing.T) {
	tests := []struct {
		name          string
		blocks, pairs int64
		maxBlocks     int
		maxBytes      int64
		want          int
	}{
		{"no caps", 1000, 4000, 0, 0, 0},
		{"under both", 100, 100, 200, EstimateBytes(200, 200), 0},
		{"block cap to 15/16", 161, 161, 160, 0, 161 - 150},
		{"memory cap, one holder each", 1000, 1000, 0, EstimateBytes(800, 800),
			// to 15/16 of 800 blocks' worth: 750
			250},
		{"memory cap, four holders each: same bytes, fewer blocks", 1000, 4000, 0, EstimateBytes(800, 3200), 250},
		{"memory cap tighter than block cap", 1000, 4000, 990, EstimateBytes(500, 2000), 1000 - 468},
		{"block cap tighter than memory cap", 1000, 1000, 500, EstimateBytes(990, 990), 1000 - 469},
		{"cap below one block evicts all", 10, 10, 0, 1, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := evictCount(tt.blocks, tt.pairs, tt.maxBlocks, tt.maxBytes); got != tt.want {
				t.Fatalf("evictCount(%d, %d, %d, %d) = %d, want %d", tt.blocks, tt.pairs, tt.maxBlocks, tt.maxBytes, got, tt.want)
			}
		})
	}
}

// storeShared stores chain c under every one of srcs.
func storeShared(t *testing.T, ix *Index, srcs []Source, c int) {
	t.Helper()
	for _, src := range srcs {
		storeChain(t, ix, src, c)
	}
}

// TestEvictionMemoryCap: under MaxBytes the index's estimate stays within
// the cap whatever the sharing, blocks held by more sources leave room for
// fewer blocks, and the least recently matched go first.
func TestEvictionMemoryCap(t *testing.T) {
	const budgetBlocks = 64 // the cap is worth this many one-holder blocks
	maxBytes := EstimateBytes(budgetBlocks, budgetBlocks)
	kept := map[int]int{}
	for _, holders := range []int{1, 4} {
		t.Run(fmt.Sprint(holders, " holders"), func(t *testing.T) {
			ix, err := New(Config{BlockSize: 16, MaxBytes: maxBytes})
			if err != nil {
				t.Fatal(err)
			}
			var srcs []Source
			for i := range holders {
				srcs = append(srcs, WorkerRank(fmt.Sprint("w", i), 0))
			}
			storeShared(t, ix, srcs, 0)
			for c := 1; c < 40; c++ {
				// Chain 0 is matched whole between stores, in a new
				// epoch: the most recent, with the chain stored next.
				for range 1 << epochShift {
					ix.Match(chain(0)[:1], MatchOptions{})
				}
				ix.Match(chain(0), MatchOptions{})
				storeShared(t, ix, srcs, c)
				st := ix.Stats()
				if est := EstimateBytes(int64(st.Blocks), int64(st.Pairs)); est > maxBytes {
					t.Fatalf("after chain %d: estimate %d bytes over the cap %d (%+v)", c, est, maxBytes, st)
				}
			}
			if got := present(t, ix, 0); got != 8 {
				t.Errorf("recently matched chain 0 lost blocks: %d of 8 left", got)
			}
			if got := present(t, ix, 1); got != 0 {
				t.Errorf("least recent chain 1 kept %d blocks", got)
			}
			kept[holders] = ix.Len()
			checkInvariants(t, ix)
		})
	}
	if kept[4] >= kept[1] {
		t.Fatalf("blocks kept: %d with 4 holders, %d with 1; more holders should leave room for fewer", kept[4], kept[1])
	}
}

// TestEstimateBytesCoversStats: EstimateBytes, which eviction goes by, is
// at least the index's own detailed estimate (Stats.Bytes) at every sharing
// degree, so MaxBytes bounds it.
func TestEstimateBytesCoversStats(t *testing.T) {
	if testing.Short() {
		// A small index's fixed table overhead outweighs its blocks.
		t.Skip("builds indexes of 256,000 blocks")
	}
	const chains = 4000 // 256,000 blocks, the size the constants were fitted at
	for _, holders := range []int{1, 2, 4, 16} {
		ix, _ := New(Config{BlockSize: 16})
		for h := range holders {
			src := WorkerRank(fmt.Sprint("w", h), 0)
			for c := range chains {
				local := make([]uint64, 64)
				eng := make([]uint64, 64)
				for i := range local {
					local[i] = uint64(c*64+i)*0x9e3779b97f4a7c15 + 1
					eng[i] = uint64(c*64 + i + 1)
				}
				if err := ix.Apply(src, Op{Kind: OpStore, Tier: kvevents.TierDevice, Local: local, Hashes: eng}); err != nil {
					t.Fatal(err)
				}
			}
		}
		st := ix.Stats()
		est := EstimateBytes(int64(st.Blocks), int64(st.Pairs))
		t.Logf("%d holders: %.1f bytes per block estimated, %.1f by Stats", holders, float64(est)/float64(st.Blocks), float64(st.Bytes)/float64(st.Blocks))
		if est < st.Bytes {
			t.Errorf("%d holders: EstimateBytes %d below Stats.Bytes %d", holders, est, st.Bytes)
		}
	}
}
