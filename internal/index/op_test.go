package index

import (
	"errors"
	"fmt"
	"testing"

	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvhash"
)

func TestOpFromEvent(t *testing.T) {
	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	cases := []struct {
		name    string
		ev      kvevents.Event
		want    Op
		wantErr error
	}{
		{
			name: "store",
			ev: kvevents.Event{Kind: kvevents.KindStored, BlockHashes: []uint64{11, 12}, ParentHash: 10, HasParent: true,
				TokenIDs: tokens, BlockSize: 4, Tier: kvevents.TierHost},
			want: Op{Kind: OpStore, Tier: host, Hashes: []uint64{11, 12}, Parent: 10, HasParent: true, BlockSize: 4,
				Local: kvhash.LocalHashes(tokens, 4, kvhash.Seed)},
		},
		{
			name: "salted LoRA store",
			ev: kvevents.Event{Kind: kvevents.KindStored, BlockHashes: []uint64{11}, TokenIDs: tokens[:4], BlockSize: 4,
				LoRAName: "sql", CacheSalt: "tenant-a"},
			want: Op{Kind: OpStore, Hashes: []uint64{11}, BlockSize: 4,
				Local: kvhash.LocalHashes(tokens[:4], 4, kvhash.SeedFor("sql", "tenant-a"))},
		},
		{
			name: "remove",
			ev:   kvevents.Event{Kind: kvevents.KindRemoved, BlockHashes: []uint64{11}, Tier: kvevents.TierDisk},
			want: Op{Kind: OpRemove, Tier: disk, Hashes: []uint64{11}},
		},
		{
			name: "clear",
			ev:   kvevents.Event{Kind: kvevents.KindCleared},
			want: Op{Kind: OpClear, AllTiers: true},
		},
		{
			name:    "placeholder",
			ev:      kvevents.Event{Kind: kvevents.KindStored, BlockHashes: []uint64{11}, Placeholder: true},
			wantErr: ErrPlaceholder,
		},
		{
			name:    "token count",
			ev:      kvevents.Event{Kind: kvevents.KindStored, BlockHashes: []uint64{11, 12}, TokenIDs: tokens[:6], BlockSize: 4},
			wantErr: ErrInvalidOp,
		},
		{
			name:    "zero block size",
			ev:      kvevents.Event{Kind: kvevents.KindStored, BlockHashes: []uint64{11}, TokenIDs: tokens[:4]},
			wantErr: ErrInvalidOp,
		},
		{
			name:    "unknown kind",
			ev:      kvevents.Event{Kind: 9},
			wantErr: ErrInvalidOp,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := OpFromEvent(c.ev)
			if !errors.Is(err, c.wantErr) || (err == nil) != (c.wantErr == nil) {
				t.Fatalf("error %v, want %v", err, c.wantErr)
			}
			if err != nil {
				return
			}
			if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", c.want) {
				t.Fatalf("op\n %+v\nwant\n %+v", got, c.want)
			}
		})
	}
}

// A block stored under one cache salt never matches a request under
// another, so no hint can cross tenants.
func TestCacheSaltIsolation(t *testing.T) {
	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	ix, _ := New(Config{BlockSize: 4})
	op, err := OpFromEvent(kvevents.Event{Kind: kvevents.KindStored, BlockHashes: []uint64{1, 2}, TokenIDs: tokens, BlockSize: 4, CacheSalt: "tenant-a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Apply(w0, op); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		salt string
		want int
	}{{"tenant-a", 2}, {"tenant-b", 0}, {"", 0}} {
		got := ix.Match(kvhash.LocalHashes(tokens, 4, kvhash.SeedFor("", c.salt)), MatchOptions{})
		depth := 0
		if len(got) > 0 {
			depth = int(got[0].Depth)
		}
		if depth != c.want {
			t.Errorf("salt %q: depth %d, want %d", c.salt, depth, c.want)
		}
	}
}

// TestBlockExtraIsolation: a block vLLM hashed with more than its tokens
// (an image) matches no request hashed from tokens, and neither does what
// is stored under it; the blocks before it still match.
func TestBlockExtraIsolation(t *testing.T) {
	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	for _, c := range []struct {
		extra []uint64
		want  int32
	}{{nil, 3}, {[]uint64{0, 0, 0}, 3}, {[]uint64{0, 7, 0}, 1}, {[]uint64{7, 0, 0}, 0}} {
		ix, _ := New(Config{BlockSize: 4})
		op, err := OpFromEvent(kvevents.Event{Kind: kvevents.KindStored, BlockHashes: []uint64{1, 2, 3}, TokenIDs: tokens, BlockSize: 4, BlockExtra: c.extra})
		if err != nil {
			t.Fatal(err)
		}
		if err := ix.Apply(w0, op); err != nil {
			t.Fatal(err)
		}
		var depth int32
		if got := ix.Match(kvhash.LocalHashes(tokens, 4, kvhash.SeedFor("", "")), MatchOptions{}); len(got) > 0 {
			depth = got[0].Depth
		}
		if depth != c.want {
			t.Errorf("extra keys %v: depth %d, want %d", c.extra, depth, c.want)
		}
	}
}

// TestSaltUnknown: a store whose salt is not known matches no request,
// whatever its salt, nor does what is stored under it; its source is one
// whose salt is not known, in a Dump too, until it holds nothing.
func TestSaltUnknown(t *testing.T) {
	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	ix, _ := New(Config{BlockSize: 4})
	root, err := OpFromEvent(kvevents.Event{Kind: kvevents.KindStored, BlockHashes: []uint64{1}, TokenIDs: tokens[:4], BlockSize: 4, SaltUnknown: true})
	if err != nil {
		t.Fatal(err)
	}
	child, err := OpFromEvent(kvevents.Event{Kind: kvevents.KindStored, BlockHashes: []uint64{2}, ParentHash: 1, HasParent: true,
		TokenIDs: tokens[4:], BlockSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	if !root.SaltUnknown || child.SaltUnknown {
		t.Fatalf("ops %+v %+v", root, child)
	}
	if !ix.SaltKnown(w0) || !ix.SaltKnown(w1) {
		t.Fatal("a source that stored nothing has its salt unknown")
	}
	if err := ix.Apply(w0, root, child); err != nil {
		t.Fatal(err)
	}
	for _, salt := range []string{"", "tenant-a"} {
		if got := ix.Match(kvhash.LocalHashes(tokens, 4, kvhash.SeedFor("", salt)), MatchOptions{}); len(got) != 0 {
			t.Errorf("salt %q matched %+v", salt, got)
		}
	}
	if ix.SaltKnown(w0) || !ix.SaltKnown(w1) {
		t.Fatalf("SaltKnown: w0 %v, w1 %v", ix.SaltKnown(w0), ix.SaltKnown(w1))
	}
	dump := ix.Dump(w0)
	if len(dump) == 0 || !dump[0].SaltUnknown {
		t.Fatalf("dump %+v", dump)
	}
	other, _ := New(Config{BlockSize: 4})
	if err := other.Apply(w1, dump...); err != nil || other.SaltKnown(w1) {
		t.Fatalf("a dump applied elsewhere: err %v, salt known %v", err, other.SaltKnown(w1))
	}
	if err := ix.Apply(w0, Op{Kind: OpRemove, Hashes: []uint64{1, 2}}); err != nil {
		t.Fatal(err)
	}
	if !ix.SaltKnown(w0) {
		t.Fatal("a source holding nothing any more still has its salt unknown")
	}
}
