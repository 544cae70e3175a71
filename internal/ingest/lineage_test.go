package ingest

import (
	"testing"

	"kvrouter/internal/kvevents"
)

func TestGroupKinds(t *testing.T) {
	var g groupKinds
	for _, c := range []struct {
		ev   kvevents.Event
		want string
	}{
		{kvevents.Event{Kind: kvevents.KindRemoved, GroupIdx: 1}, ""}, // not learnt yet
		{kvevents.Event{Kind: kvevents.KindStored, GroupIdx: 1, SpecKind: "sliding_window"}, "sliding_window"},
		{kvevents.Event{Kind: kvevents.KindStored, GroupIdx: 0, SpecKind: "full_attention"}, "full_attention"},
		{kvevents.Event{Kind: kvevents.KindRemoved, GroupIdx: 1}, "sliding_window"},
		{kvevents.Event{Kind: kvevents.KindRemoved, GroupIdx: 0}, "full_attention"},
		{kvevents.Event{Kind: kvevents.KindRemoved, GroupIdx: 2}, ""},
		{kvevents.Event{Kind: kvevents.KindRemoved, GroupIdx: 0, SpecKind: "mamba"}, "mamba"}, // named: as named
		{kvevents.Event{Kind: kvevents.KindStored, GroupIdx: 3}, ""},
	} {
		if got := g.Of(&c.ev); got != c.want {
			t.Errorf("%+v: kind %q, want %q", c.ev, got, c.want)
		}
	}
}

func TestSaltChains(t *testing.T) {
	var c saltChains
	steps := []struct {
		ev   kvevents.Event
		want string // the store's salt after Inherit
		held int
	}{
		{kvevents.Event{Kind: kvevents.KindStored, BlockHashes: []uint64{1, 2}, CacheSalt: "a"}, "a", 2},
		{kvevents.Event{Kind: kvevents.KindStored, BlockHashes: []uint64{3}, ParentHash: 2, HasParent: true}, "a", 3},
		{kvevents.Event{Kind: kvevents.KindStored, BlockHashes: []uint64{9}, ParentHash: 8, HasParent: true}, "", 3},
		{kvevents.Event{Kind: kvevents.KindStored, BlockHashes: []uint64{4}, ParentHash: 3, HasParent: true, CacheSalt: "b"}, "b", 4},
		{kvevents.Event{Kind: kvevents.KindRemoved, BlockHashes: []uint64{3, 7}}, "", 3},
		{kvevents.Event{Kind: kvevents.KindStored, BlockHashes: []uint64{5}, ParentHash: 3, HasParent: true}, "", 3},
		// Block 2 also goes to host memory and to the runner: dropped from
		// the GPU, it keeps its salt while either holds it.
		{kvevents.Event{Kind: kvevents.KindStored, BlockHashes: []uint64{2}, ParentHash: 1, HasParent: true, Tier: kvevents.TierHost}, "a", 3},
		{kvevents.Event{Kind: kvevents.KindStored, BlockHashes: []uint64{2}, ParentHash: 1, HasParent: true, Tier: kvevents.TierHost, Ownership: kvevents.OwnedByRunner}, "a", 3},
		{kvevents.Event{Kind: kvevents.KindRemoved, BlockHashes: []uint64{2}}, "", 3},
		{kvevents.Event{Kind: kvevents.KindRemoved, BlockHashes: []uint64{2}, Tier: kvevents.TierHost}, "", 3},
		{kvevents.Event{Kind: kvevents.KindStored, BlockHashes: []uint64{6}, ParentHash: 2, HasParent: true, Tier: kvevents.TierHost}, "a", 4},
		{kvevents.Event{Kind: kvevents.KindRemoved, BlockHashes: []uint64{2}, Tier: kvevents.TierHost, Ownership: kvevents.OwnedByRunner}, "", 3},
		{kvevents.Event{Kind: kvevents.KindStored, BlockHashes: []uint64{7}, ParentHash: 2, HasParent: true}, "", 3},
		// The same hash stored under another salt: the latest store speaks.
		{kvevents.Event{Kind: kvevents.KindStored, BlockHashes: []uint64{1}, CacheSalt: "c", Tier: kvevents.TierHost}, "c", 3},
		{kvevents.Event{Kind: kvevents.KindRemoved, BlockHashes: []uint64{1}}, "", 3},
		{kvevents.Event{Kind: kvevents.KindCleared}, "", 0},
		{kvevents.Event{Kind: kvevents.KindStored, BlockHashes: []uint64{6}, ParentHash: 1, HasParent: true}, "", 0},
	}
	for i, s := range steps {
		ev := s.ev
		c.Inherit(&ev)
		if ev.Kind == kvevents.KindStored && ev.CacheSalt != s.want {
			t.Errorf("step %d: salt %q, want %q", i, ev.CacheSalt, s.want)
		}
		if len(c) != s.held {
			t.Errorf("step %d: %d salted blocks kept, want %d", i, len(c), s.held)
		}
	}
}
