package ingest

import (
	"errors"
	"testing"

	"kvrouter/internal/index"
	"kvrouter/internal/index/indextest"
	"kvrouter/internal/kvevents"
)

type aggStep struct {
	tp    int // -1: Reset
	op    index.Op
	err   error  // wanted error (errors.Is)
	owner string // the owner's blocks after the step, "name@tier" sorted
}

const (
	dev  = kvevents.TierDevice
	host = kvevents.TierHost
	ext  = kvevents.TierExternal
)

func TestAggregator(t *testing.T) {
	tr := indextest.NewTree(4, "A:", "B:A", "C:B", "D:C", "X:", "Y:X")
	clear := index.Op{Kind: index.OpClear, AllTiers: true}
	tests := []struct {
		name  string
		ranks int
		steps []aggStep
	}{
		{"tp2 both store", 2, []aggStep{
			{tp: 0, op: tr.StoreOp(ext, "A", "B")},
			{tp: 1, op: tr.StoreOp(ext, "A", "B"), owner: "A@3 B@3"},
		}},
		{"tp2 one rank evicts alone, then stores again", 2, []aggStep{
			{tp: 0, op: tr.StoreOp(ext, "A", "B", "C")},
			{tp: 1, op: tr.StoreOp(ext, "A", "B", "C"), owner: "A@3 B@3 C@3"},
			{tp: 1, op: tr.RemoveOp(ext, "B"), owner: "A@3 C@3"},
			{tp: 0, op: tr.RemoveOp(ext, "B"), owner: "A@3 C@3"},
			{tp: 0, op: tr.StoreOp(ext, "B"), owner: "A@3 C@3"},
			{tp: 1, op: tr.StoreOp(ext, "B"), owner: "A@3 B@3 C@3"},
		}},
		{"tp2 stores in different orders and runs", 2, []aggStep{
			{tp: 0, op: tr.StoreOp(ext, "A", "B", "C")},
			// Rank 1 stores the deepest block first, under a parent only
			// rank 0 holds: its identity comes from rank 0's chain.
			{tp: 1, op: tr.StoreOp(ext, "C"), owner: "C@3"},
			{tp: 1, op: tr.StoreOp(ext, "A"), owner: "A@3 C@3"},
			{tp: 1, op: tr.StoreOp(ext, "B"), owner: "A@3 B@3 C@3"},
		}},
		{"tp2 a clear from one rank", 2, []aggStep{
			{tp: 0, op: tr.StoreOp(ext, "A", "B")},
			{tp: 1, op: tr.StoreOp(ext, "A", "B", "C"), owner: "A@3 B@3"},
			{tp: 1, op: clear, owner: ""},
			{tp: 0, op: tr.StoreOp(ext, "C"), owner: ""},
			{tp: 1, op: tr.StoreOp(ext, "A"), owner: "A@3"},
		}},
		{"tp2 reset of the stream", 2, []aggStep{
			{tp: 0, op: tr.StoreOp(ext, "A", "B")},
			{tp: 1, op: tr.StoreOp(ext, "A", "B"), owner: "A@3 B@3"},
			{tp: -1, owner: ""},
			// After the reset nobody is known to hold A: B cannot be
			// identified and must not be attached at the root.
			{tp: 0, op: tr.StoreOp(ext, "B"), err: index.ErrUnknownParent, owner: ""},
			{tp: 0, op: tr.StoreOp(ext, "X", "Y")},
			{tp: 1, op: tr.StoreOp(ext, "X"), owner: "X@3"},
		}},
		{"tp2 unknown parent changes nothing", 2, []aggStep{
			{tp: 0, op: tr.StoreOp(ext, "C", "D"), err: index.ErrUnknownParent},
			{tp: 1, op: tr.StoreOp(ext, "A"), owner: ""},
			{tp: 0, op: tr.StoreOp(ext, "A"), owner: "A@3"},
		}},
		{"tp2 tiers are separate", 2, []aggStep{
			{tp: 0, op: tr.StoreOp(host, "A")},
			{tp: 0, op: tr.StoreOp(dev, "A")},
			{tp: 1, op: tr.StoreOp(dev, "A"), owner: "A@0"},
			{tp: 1, op: tr.RemoveOp(host, "A"), owner: "A@0"},
			{tp: 1, op: tr.StoreOp(host, "A"), owner: "A@0 A@1"},
			{tp: 0, op: index.Op{Kind: index.OpClear, Tier: host}, owner: "A@0"},
			{tp: 1, op: tr.RemoveOp(dev, "A"), owner: ""},
		}},
		{"tp2 removal of a block never stored", 2, []aggStep{
			{tp: 0, op: tr.RemoveOp(ext, "A")},
			{tp: 0, op: tr.StoreOp(ext, "A")},
			{tp: 1, op: tr.StoreOp(ext, "A"), owner: "A@3"},
		}},
		{"tp4 all ranks in different orders", 4, []aggStep{
			{tp: 2, op: tr.StoreOp(ext, "A", "B", "C")},
			{tp: 0, op: tr.StoreOp(ext, "A")},
			{tp: 3, op: tr.StoreOp(ext, "B", "C")},
			{tp: 1, op: tr.StoreOp(ext, "A", "B")},
			{tp: 0, op: tr.StoreOp(ext, "B", "C"), owner: "B@3"},
			{tp: 3, op: tr.StoreOp(ext, "A"), owner: "A@3 B@3"},
			{tp: 1, op: tr.StoreOp(ext, "C"), owner: "A@3 B@3 C@3"},
		}},
		{"tp4 one rank evicts alone", 4, []aggStep{
			{tp: 0, op: tr.StoreOp(ext, "X", "Y")},
			{tp: 1, op: tr.StoreOp(ext, "X", "Y")},
			{tp: 2, op: tr.StoreOp(ext, "X", "Y")},
			{tp: 3, op: tr.StoreOp(ext, "X", "Y"), owner: "X@3 Y@3"},
			{tp: 2, op: tr.RemoveOp(ext, "X"), owner: "Y@3"},
			{tp: 2, op: tr.RemoveOp(ext, "Y"), owner: ""},
			{tp: 2, op: tr.StoreOp(ext, "X", "Y"), owner: "X@3 Y@3"},
		}},
		{"tp4 a clear from one rank and a reset", 4, []aggStep{
			{tp: 0, op: tr.StoreOp(ext, "A")},
			{tp: 1, op: tr.StoreOp(ext, "A")},
			{tp: 2, op: tr.StoreOp(ext, "A")},
			{tp: 3, op: tr.StoreOp(ext, "A"), owner: "A@3"},
			{tp: 3, op: clear, owner: ""},
			{tp: 3, op: tr.StoreOp(ext, "A"), owner: "A@3"},
			{tp: -1, owner: ""},
			{tp: 0, op: tr.StoreOp(ext, "A"), owner: ""},
		}},
		{"tp out of range", 2, []aggStep{
			{tp: 2, op: tr.StoreOp(ext, "A"), err: index.ErrInvalidOp},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ag := newAggregator(tt.ranks)
			ix, err := index.New(index.Config{BlockSize: tr.BlockSize})
			if err != nil {
				t.Fatal(err)
			}
			owner := index.CacheOwner("o")
			for i, st := range tt.steps {
				if st.tp < 0 {
					ag.Reset()
					ix.RemoveSource(owner)
				} else {
					out, err := ag.Apply(st.tp, st.op)
					if !errors.Is(err, st.err) || (st.err == nil) != (err == nil) {
						t.Fatalf("step %d: err %v, want %v", i, err, st.err)
					}
					for _, o := range out {
						// Stores keep the block size for the index to check.
						if o.Kind == index.OpStore && o.BlockSize != st.op.BlockSize {
							t.Fatalf("step %d: aggregate store %+v lost block size %d", i, o, st.op.BlockSize)
						}
					}
					if err := ix.Apply(owner, out...); err != nil {
						t.Fatalf("step %d: the owner's index refused the aggregate %+v: %v", i, out, err)
					}
				}
				if got := tr.DumpSet(t, ix, owner); got != st.owner {
					t.Fatalf("step %d: owner holds %q, want %q", i, got, st.owner)
				}
			}
		})
	}
}

// An engine hash reused for another block (last store wins) withdraws the
// old block from the owner even though only one rank stored the new one.
func TestAggregatorRemap(t *testing.T) {
	tr := indextest.NewTree(4, "A:", "B:")
	tr.Engine["B"] = tr.Engine["A"] // same engine hash, other tokens
	ag := newAggregator(2)
	ix, _ := index.New(index.Config{BlockSize: 4})
	owner := index.CacheOwner("o")
	apply := func(tp int, op index.Op) {
		t.Helper()
		out, err := ag.Apply(tp, op)
		if err != nil {
			t.Fatal(err)
		}
		if err := ix.Apply(owner, out...); err != nil {
			t.Fatal(err)
		}
	}
	apply(0, tr.StoreOp(ext, "A"))
	apply(1, tr.StoreOp(ext, "A"))
	if got := len(ix.Dump(owner)); got != 1 {
		t.Fatalf("A not held by the owner: %d ops", got)
	}
	apply(0, tr.StoreOp(ext, "B"))
	if d := ix.Dump(owner); len(d) != 0 {
		t.Fatalf("owner still holds %+v after rank 0 reused the hash", d)
	}
	apply(1, tr.StoreOp(ext, "B"))
	d := ix.Dump(owner)
	seq, _ := tr.Seq("B")
	if len(d) != 1 || d[0].Seqs[0] != seq {
		t.Fatalf("owner holds %+v, want B", d)
	}
}
