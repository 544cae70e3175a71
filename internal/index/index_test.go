package index

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvhash"
)

var (
	w0 = WorkerRank("w0", 0)
	w1 = WorkerRank("w1", 0)
	w2 = WorkerRank("w0", 1) // another rank of w0
	o1 = CacheOwner("0123456789abcdef0123456789abcdef:0123456789abcdef0123456789abcdef/0123456789abcdef/0123456789abcdef0123456789abcdef")
)

// root stores local hashes at the root; engine hashes are 100+local unless
// given.
func root(tier kvevents.Tier, local ...uint64) Op {
	return Op{Kind: OpStore, Tier: tier, Local: local, Hashes: engines(100, local)}
}

// under stores local hashes below the source's block with engine hash parent.
func under(parent uint64, tier kvevents.Tier, local ...uint64) Op {
	op := root(tier, local...)
	op.Parent, op.HasParent = parent, true
	return op
}

func engines(base uint64, local []uint64) []uint64 {
	out := make([]uint64, len(local))
	for i, l := range local {
		out[i] = base + l
	}
	return out
}

func remove(tier kvevents.Tier, hashes ...uint64) Op {
	return Op{Kind: OpRemove, Tier: tier, Hashes: hashes}
}

type step struct {
	src     Source
	op      Op
	wantErr error
	drop    bool // RemoveSource instead of op
}

type want struct {
	src         Source
	depth, dev  int
	tiers       [NumTiers]int32
	chain       []uint64 // checked when non-nil
	anyOrdering bool
}

const (
	dev  = kvevents.TierDevice
	host = kvevents.TierHost
	disk = kvevents.TierDisk
	ext  = kvevents.TierExternal
)

func TestBehaviour(t *testing.T) {
	cases := []struct {
		name  string
		steps []step
		query []uint64
		want  []want
	}{
		{
			name:  "root chain matches its prefix",
			steps: []step{{src: w0, op: root(dev, 1, 2, 3)}},
			query: []uint64{1, 2, 3, 4},
			want:  []want{{src: w0, depth: 3, dev: 3, tiers: [4]int32{3}, chain: []uint64{101, 102, 103}}},
		},
		{
			name:  "a request diverging after the first block",
			steps: []step{{src: w0, op: root(dev, 1, 2, 3)}},
			query: []uint64{1, 9, 3},
			want:  []want{{src: w0, depth: 1, dev: 1, tiers: [4]int32{1}}},
		},
		{
			name:  "nothing matches another first block",
			steps: []step{{src: w0, op: root(dev, 1, 2, 3)}},
			query: []uint64{2, 3},
		},
		{
			name:  "a store links under its parent",
			steps: []step{{src: w0, op: root(dev, 1, 2)}, {src: w0, op: under(102, dev, 3, 4)}},
			query: []uint64{1, 2, 3, 4},
			want:  []want{{src: w0, depth: 4, dev: 4, tiers: [4]int32{4}, chain: []uint64{101, 102, 103, 104}}},
		},
		{
			name: "an unknown parent is rejected, not attached at the root",
			steps: []step{
				{src: w0, op: root(dev, 1)},
				{src: w0, op: under(999, dev, 2), wantErr: ErrUnknownParent},
			},
			query: []uint64{1, 2},
			want:  []want{{src: w0, depth: 1, dev: 1, tiers: [4]int32{1}}},
		},
		{
			name: "a parent held only by another source is unknown",
			steps: []step{
				{src: w1, op: root(dev, 1)},
				{src: w0, op: under(101, dev, 2), wantErr: ErrUnknownParent},
			},
			query: []uint64{1, 2},
			want:  []want{{src: w1, depth: 1, dev: 1, tiers: [4]int32{1}}},
		},
		{
			name: "after a removal the source is not named for those blocks",
			steps: []step{
				{src: w0, op: root(dev, 1, 2, 3)},
				{src: w1, op: root(dev, 1, 2, 3)},
				{src: w0, op: remove(dev, 103)},
			},
			query: []uint64{1, 2, 3},
			want: []want{
				{src: w1, depth: 3, dev: 3, tiers: [4]int32{3}},
				{src: w0, depth: 2, dev: 2, tiers: [4]int32{2}},
			},
		},
		{
			name: "a removed parent leaves a hole",
			steps: []step{
				{src: w0, op: root(dev, 1, 2, 3)},
				{src: w0, op: remove(dev, 102)},
			},
			query: []uint64{1, 2, 3},
			want:  []want{{src: w0, depth: 1, dev: 1, tiers: [4]int32{1}}},
		},
		{
			name: "lower tiers extend the device prefix",
			steps: []step{
				{src: w0, op: root(dev, 1, 2)},
				{src: w0, op: under(102, host, 3)},
				{src: w0, op: under(103, disk, 4, 5)},
			},
			query: []uint64{1, 2, 3, 4, 5, 6},
			want:  []want{{src: w0, depth: 5, dev: 2, tiers: [4]int32{2, 1, 2, 0}}},
		},
		{
			name: "an offloaded block stays on the host tier",
			steps: []step{
				{src: w0, op: root(dev, 1, 2)},
				{src: w0, op: root(host, 1, 2)},
				{src: w0, op: remove(dev, 102)},
			},
			query: []uint64{1, 2},
			want:  []want{{src: w0, depth: 2, dev: 1, tiers: [4]int32{1, 1}}},
		},
		{
			name: "a block on device and host counts on device",
			steps: []step{
				{src: w0, op: root(host, 1, 2)},
				{src: w0, op: root(dev, 1)},
			},
			query: []uint64{1, 2},
			want:  []want{{src: w0, depth: 2, dev: 1, tiers: [4]int32{1, 1}}},
		},
		{
			name: "a device block past a host block is not device prefix",
			steps: []step{
				{src: w0, op: root(host, 1)},
				{src: w0, op: under(101, dev, 2)},
			},
			query: []uint64{1, 2},
			want:  []want{{src: w0, depth: 2, dev: 0, tiers: [4]int32{1, 1}}},
		},
		{
			name: "clearing one tier keeps the others",
			steps: []step{
				{src: w0, op: root(dev, 1, 2)},
				{src: w0, op: root(host, 1, 2, 3)},
				{src: w0, op: Op{Kind: OpClear, Tier: dev}},
			},
			query: []uint64{1, 2, 3},
			want:  []want{{src: w0, depth: 3, dev: 0, tiers: [4]int32{0, 3}}},
		},
		{
			name: "clearing all tiers drops the source's blocks only",
			steps: []step{
				{src: w0, op: root(dev, 1, 2)},
				{src: w1, op: root(dev, 1)},
				{src: w0, op: Op{Kind: OpClear, AllTiers: true}},
			},
			query: []uint64{1, 2},
			want:  []want{{src: w1, depth: 1, dev: 1, tiers: [4]int32{1}}},
		},
		{
			name: "a cache owner outlives its worker",
			steps: []step{
				{src: w0, op: root(dev, 1, 2)},
				{src: o1, op: root(ext, 1, 2, 3)},
				{src: w0, drop: true},
			},
			query: []uint64{1, 2, 3},
			want:  []want{{src: o1, depth: 3, dev: 0, tiers: [4]int32{0, 0, 0, 3}}},
		},
		{
			name: "sources are ordered deepest first",
			steps: []step{
				{src: w1, op: root(dev, 1)},
				{src: w0, op: root(dev, 1, 2, 3)},
				{src: w2, op: root(dev, 1, 2)},
				{src: o1, op: root(ext, 1, 2)},
			},
			query: []uint64{1, 2, 3},
			want: []want{
				{src: w0, depth: 3, dev: 3, tiers: [4]int32{3}},
				{src: w2, depth: 2, dev: 2, tiers: [4]int32{2}, anyOrdering: true},
				{src: o1, depth: 2, tiers: [4]int32{0, 0, 0, 2}, anyOrdering: true},
				{src: w1, depth: 1, dev: 1, tiers: [4]int32{1}},
			},
		},
		{
			name: "each source keeps its own engine hashes",
			steps: []step{
				{src: w0, op: root(dev, 1, 2, 3)},
				{src: w1, op: Op{Kind: OpStore, Local: []uint64{1, 2}, Hashes: []uint64{7, 8}}},
			},
			query: []uint64{1, 2, 3},
			want: []want{
				{src: w0, depth: 3, dev: 3, tiers: [4]int32{3}, chain: []uint64{101, 102, 103}},
				{src: w1, depth: 2, dev: 2, tiers: [4]int32{2}, chain: []uint64{7, 8}},
			},
		},
		{
			name: "a reused engine hash moves to the new block",
			steps: []step{
				{src: w0, op: root(dev, 1, 2)},
				{src: w0, op: Op{Kind: OpStore, Local: []uint64{5}, Hashes: []uint64{102}}},
			},
			query: []uint64{1, 2},
			want:  []want{{src: w0, depth: 1, dev: 1, tiers: [4]int32{1}}},
		},
		{
			name: "a store from a dump needs no parent",
			steps: []step{
				{src: w0, op: Op{Kind: OpStore, Hashes: []uint64{9}, Seqs: []uint64{kvhash.SequenceHashes([]uint64{1, 2})[1]}, Depths: []uint32{1}}},
				{src: w0, op: root(dev, 1)},
			},
			query: []uint64{1, 2},
			want:  []want{{src: w0, depth: 2, dev: 2, tiers: [4]int32{2}, chain: []uint64{101, 9}}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ix, err := New(Config{BlockSize: 16})
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range c.steps {
				if s.drop {
					ix.RemoveSource(s.src)
					continue
				}
				if err := ix.Apply(s.src, s.op); !errors.Is(err, s.wantErr) || (err == nil) != (s.wantErr == nil) {
					t.Fatalf("step %d: error %v, want %v", i, err, s.wantErr)
				}
			}
			got := ix.Match(c.query, MatchOptions{Chains: true})
			if len(got) != len(c.want) {
				t.Fatalf("got %d results %+v, want %d", len(got), got, len(c.want))
			}
			for i, w := range c.want {
				g := got[i]
				if w.anyOrdering {
					j := slices.IndexFunc(got, func(m Match) bool { return m.Source() == w.src })
					if j < 0 {
						t.Fatalf("no result for %s", w.src)
					}
					g = got[j]
				}
				if g.Source() != w.src || int(g.Depth) != w.depth || int(g.DeviceDepth) != w.dev || g.Tiers != w.tiers {
					t.Fatalf("result %d: %+v, want %+v", i, g, w)
				}
				if len(g.Chain) != int(g.Depth) || (w.chain != nil && !slices.Equal(g.Chain, w.chain)) {
					t.Fatalf("result %d: chain %v, want %v", i, g.Chain, w.chain)
				}
			}
			checkInvariants(t, ix)
		})
	}
}

func TestCounters(t *testing.T) {
	ix, _ := New(Config{BlockSize: 16})
	steps := []struct {
		src Source
		op  Op
	}{
		{w0, root(dev, 1, 2, 3)},
		{w0, under(77, dev, 4)}, // unknown parent
		{w0, remove(dev, 55)},   // unknown removal
		{w1, root(dev, 1, 2)},   // shared
		{w0, root(dev, 9)},      // a fourth block
		{w0, Op{Kind: OpStore, Local: []uint64{8}, Hashes: []uint64{109}}}, // remaps 109
	}
	for _, s := range steps {
		_ = ix.Apply(s.src, s.op)
	}
	st := ix.Stats()
	want := Stats{Blocks: 4, Pairs: 6, Sources: 2, UnknownParent: 1, UnknownRemove: 1, Remapped: 1}
	st.Bytes = 0
	if st != want {
		t.Fatalf("stats %+v, want %+v", st, want)
	}
	if got := ix.Stats().Bytes; got <= 0 {
		t.Fatalf("bytes estimate %d", got)
	}
	if got := len(ix.Sources()); got != 2 {
		t.Fatalf("%d sources", got)
	}
}

func TestBatchStopsAtFirstRejectedOp(t *testing.T) {
	ix, _ := New(Config{BlockSize: 16})
	err := ix.Apply(w0, root(dev, 1), under(999, dev, 2), root(dev, 3))
	var oe *OpError
	if !errors.As(err, &oe) || oe.Pos != 1 || oe.Kind != OpStore || !errors.Is(err, ErrUnknownParent) {
		t.Fatalf("error %v, want an OpError at op 1 wrapping ErrUnknownParent", err)
	}
	if got := ix.Match([]uint64{1}, MatchOptions{}); len(got) != 1 {
		t.Fatalf("op 0 not applied: %+v", got)
	}
	if got := ix.Match([]uint64{3}, MatchOptions{}); len(got) != 0 {
		t.Fatalf("op 2 applied after a rejected op: %+v", got)
	}
}

func TestInvalidOps(t *testing.T) {
	cases := []struct {
		name string
		src  Source
		op   Op
		want error
	}{
		{"lengths differ", w0, Op{Kind: OpStore, Local: []uint64{1, 2}, Hashes: []uint64{1}}, ErrInvalidOp},
		{"seqs without depths", w0, Op{Kind: OpStore, Seqs: []uint64{1}, Hashes: []uint64{1}}, ErrInvalidOp},
		{"local and seqs", w0, Op{Kind: OpStore, Local: []uint64{1}, Seqs: []uint64{1}, Depths: []uint32{0}, Hashes: []uint64{1}}, ErrInvalidOp},
		{"bad tier", w0, Op{Kind: OpRemove, Tier: 9}, ErrInvalidOp},
		{"bad kind", w0, Op{Kind: 0}, ErrInvalidOp},
		{"block size", w0, Op{Kind: OpStore, Local: []uint64{1}, Hashes: []uint64{1}, BlockSize: 32}, ErrBlockSize},
		{"empty source", Source{}, root(dev, 1), ErrSource},
		{"worker and owner", Source{Worker: "w", Owner: "o"}, root(dev, 1), ErrSource},
		{"negative rank", Source{Worker: "w", Rank: -1}, root(dev, 1), ErrSource},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ix, _ := New(Config{BlockSize: 16})
			if err := ix.Apply(c.src, c.op); !errors.Is(err, c.want) {
				t.Fatalf("error %v, want %v", err, c.want)
			}
			if ix.Len() != 0 {
				t.Fatalf("a rejected op changed the index")
			}
		})
	}
}

func TestBlockSizeMessageNamesBoth(t *testing.T) {
	ix, _ := New(Config{BlockSize: 16})
	err := ix.Apply(w0, Op{Kind: OpStore, Local: []uint64{1}, Hashes: []uint64{1}, BlockSize: 32})
	if !errors.Is(err, ErrBlockSize) || !strings.Contains(err.Error(), "32") || !strings.Contains(err.Error(), "16") {
		t.Fatalf("error %v should name both block sizes", err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Config{{}, {BlockSize: -1}, {BlockSize: 16, MaxBlocks: -1}} {
		if _, err := New(cfg); err == nil {
			t.Fatalf("New(%+v) accepted", cfg)
		}
	}
}

func TestConflict(t *testing.T) {
	ix, _ := New(Config{BlockSize: 16})
	w3 := WorkerRank("w3", 0)
	_ = ix.Apply(w0, root(dev, 1, 2))
	_ = ix.Apply(w1, Op{Kind: OpStore, Local: []uint64{1, 2}, Hashes: []uint64{901, 902}}) // another seed
	_ = ix.Apply(w2, root(dev, 1))                                                         // agrees with w0
	_ = ix.Apply(w3, Op{Kind: OpStore, Local: []uint64{1}, Hashes: []uint64{901}})         // agrees with w1
	cases := []struct {
		a, b Source
		want bool
	}{
		{w0, w1, true}, {w1, w0, true}, {w0, w2, false}, {w1, w2, true},
		{w1, w3, false}, {w0, w3, true}, {w2, w3, true}, {w0, w0, false}, {w0, o1, false},
	}
	for _, c := range cases {
		if got := ix.Conflict(c.a, c.b); got != c.want {
			t.Errorf("Conflict(%s, %s) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
	if st := ix.Stats(); st.ConflictPairs != 4 || st.ConflictStores != 4 {
		t.Errorf("stats %+v, want 4 pairs from 4 block stores", st)
	}
	ix.RemoveSource(w1)
	if ix.Conflict(w0, w1) || ix.Stats().ConflictPairs != 2 {
		t.Errorf("conflicts of a removed source linger")
	}
	checkInvariants(t, ix)
}

// TestMatchGen: (ID, Gen) names one source: stable while it stays, never
// repeated for another source given its number, nor for it coming back.
func TestMatchGen(t *testing.T) {
	ix, _ := New(Config{BlockSize: 16})
	type name struct{ id, gen uint32 }
	of := func(src Source) name {
		t.Helper()
		for _, m := range ix.Match([]uint64{1, 2}, MatchOptions{}) {
			if m.Source() == src {
				return name{m.ID, m.Gen}
			}
		}
		t.Fatalf("no match for %s", src)
		return name{}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(ix.Apply(w0, root(dev, 1, 2)))
	first := of(w0)
	must(ix.Apply(w1, root(dev, 1)))
	if of(w0) != first || of(w1) == first {
		t.Fatalf("w0 %+v then %+v, w1 %+v", first, of(w0), of(w1))
	}
	ix.RemoveSource(w0)
	must(ix.Apply(w2, root(dev, 1, 2)))
	reused := of(w2)
	if reused.id != first.id {
		t.Fatalf("w2 got number %d, not the freed %d: the test no longer reuses one", reused.id, first.id)
	}
	if reused.gen == first.gen {
		t.Fatalf("w2 took w0's number and generation %+v", reused)
	}
	must(ix.Apply(w0, root(dev, 1, 2)))
	if back := of(w0); back == first || back == reused || back == of(w1) {
		t.Fatalf("w0 back as %+v (first %+v, w2 %+v)", back, first, of(w2))
	}
}
