package index

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvhash"
)

// model is the brute-force reference: per source, a map from identity to
// what it holds there. It implements the same semantics as the index in the
// most direct way, without sharing or compaction.
type model struct {
	srcs      map[Source]*modelSource
	conflicts map[[2]Source]bool
}

type modelHold struct {
	e     uint64
	tiers uint32
}

type modelSource struct {
	bySeq    map[uint64]*modelHold
	byEngine map[uint64]uint64
}

func newModel() *model {
	return &model{srcs: make(map[Source]*modelSource), conflicts: make(map[[2]Source]bool)}
}

func (m *model) source(src Source) *modelSource {
	ms := m.srcs[src]
	if ms == nil {
		ms = &modelSource{bySeq: make(map[uint64]*modelHold), byEngine: make(map[uint64]uint64)}
		m.srcs[src] = ms
	}
	return ms
}

func conflictKey(a, b Source) [2]Source {
	if b.Compare(a) < 0 {
		a, b = b, a
	}
	return [2]Source{a, b}
}

func (m *model) apply(src Source, op Op) error {
	ms := m.source(src)
	bit := uint32(1) << op.Tier
	switch op.Kind {
	case OpStore:
		var prev uint64
		if op.Seqs == nil && op.HasParent {
			seq, ok := ms.byEngine[op.Parent]
			if !ok || ms.bySeq[seq] == nil || ms.bySeq[seq].e != op.Parent {
				return ErrUnknownParent
			}
			prev = seq
		}
		for i, e := range op.Hashes {
			var seq uint64
			switch {
			case op.Seqs != nil:
				seq = op.Seqs[i]
			case i == 0 && !op.HasParent:
				seq = op.Local[0]
			default:
				seq = kvhash.SequenceHash(prev, op.Local[i])
			}
			prev = seq
			m.hold(src, ms, seq, bit, e)
		}
	case OpRemove:
		for _, e := range op.Hashes {
			seq, ok := ms.byEngine[e]
			if !ok {
				continue
			}
			h := ms.bySeq[seq]
			if h.tiers &^= bit; h.tiers == 0 {
				delete(ms.bySeq, seq)
				delete(ms.byEngine, e)
			}
		}
	case OpClear:
		tiers := bit
		if op.AllTiers {
			tiers = tierMask
		}
		for seq, h := range ms.bySeq {
			if h.tiers &^= tiers; h.tiers == 0 {
				delete(ms.bySeq, seq)
				delete(ms.byEngine, h.e)
			}
		}
	}
	return nil
}

func (m *model) hold(src Source, ms *modelSource, seq uint64, bit uint32, e uint64) {
	h := ms.bySeq[seq]
	if h == nil || h.e != e {
		for other, os := range m.srcs {
			if oh := os.bySeq[seq]; other != src && oh != nil && oh.e != e {
				m.conflicts[conflictKey(src, other)] = true
			}
		}
	}
	if h != nil {
		h.tiers |= bit
		if h.e != e {
			if ms.byEngine[h.e] == seq {
				delete(ms.byEngine, h.e)
			}
			h.e = e
		}
	} else {
		ms.bySeq[seq] = &modelHold{e: e, tiers: bit}
	}
	if old, ok := ms.byEngine[e]; ok && old != seq {
		if oh := ms.bySeq[old]; oh != nil && oh.e == e {
			delete(ms.bySeq, old)
		}
	}
	ms.byEngine[e] = seq
}

func (m *model) removeSource(src Source) {
	delete(m.srcs, src)
	for k := range m.conflicts {
		if k[0] == src || k[1] == src {
			delete(m.conflicts, k)
		}
	}
}

func (m *model) match(local []uint64, chains bool) []Match {
	seqs := kvhash.SequenceHashes(local)
	var out []Match
	for src, ms := range m.srcs {
		r := Match{src: &src}
		devRun := true
		for _, seq := range seqs {
			h := ms.bySeq[seq]
			if h == nil {
				break
			}
			if devRun && h.tiers&1 != 0 {
				r.DeviceDepth++
			} else {
				devRun = false
			}
			r.Tiers[fastest(h.tiers)]++
			r.Depth++
			if chains {
				r.Chain = append(r.Chain, h.e)
			}
		}
		if r.Depth > 0 {
			out = append(out, r)
		}
	}
	sortMatches(out)
	return out
}

// held counts src's blocks per tier, a block once on each tier holding it.
func (m *model) held(src Source) (n [NumTiers]int) {
	if ms := m.srcs[src]; ms != nil {
		for _, h := range ms.bySeq {
			for t := range numTiers {
				if h.tiers&(1<<t) != 0 {
					n[t]++
				}
			}
		}
	}
	return n
}

func fastest(mask uint32) int {
	for t := range numTiers {
		if mask&(1<<t) != 0 {
			return t
		}
	}
	return -1
}

func (m *model) pairs() (blocks, pairs int) {
	seen := make(map[uint64]bool)
	for _, ms := range m.srcs {
		for seq := range ms.bySeq {
			seen[seq] = true
			pairs++
		}
	}
	return len(seen), pairs
}

// sortMatches puts equal results in one order: the index orders by depth
// only.
func sortMatches(ms []Match) {
	slices.SortStableFunc(ms, func(a, b Match) int {
		if c := cmp.Compare(b.Depth, a.Depth); c != 0 {
			return c
		}
		return a.Source().Compare(b.Source())
	})
}

func sameMatches(t *testing.T, what string, got, want []Match) {
	t.Helper()
	for i := 1; i < len(got); i++ {
		if got[i].Depth > got[i-1].Depth {
			t.Fatalf("%s: results not deepest first: %+v", what, got)
		}
	}
	got, want = slices.Clone(got), slices.Clone(want)
	sortMatches(got)
	sortMatches(want)
	if len(got) != len(want) {
		t.Fatalf("%s: %d results, want %d\n got  %+v\n want %+v", what, len(got), len(want), got, want)
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Source() != w.Source() || g.Depth != w.Depth || g.DeviceDepth != w.DeviceDepth || g.Tiers != w.Tiers || !slices.Equal(g.Chain, w.Chain) {
			t.Fatalf("%s: result %d\n got  %+v\n want %+v", what, i, g, w)
		}
	}
}

// world generates ops over a small universe of token paths, so that sources
// share prefixes, diverge, drop parents and disagree on hash seeds.
type world struct {
	rng     *rand.Rand
	sources []Source
	seedOf  map[Source]uint64 // engine hash seed group
	paths   [][]uint64        // local hashes
}

func newWorld(seed uint64, nsrc, npaths, maxLen int) *world {
	w := &world{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), seedOf: make(map[Source]uint64)}
	for i := range nsrc {
		var s Source
		if i%3 == 2 {
			s = CacheOwner(fmt.Sprintf("owner-%d", i))
		} else {
			s = WorkerRank(fmt.Sprintf("w%d", i/2), i%2)
		}
		w.sources = append(w.sources, s)
		// Most sources share a hash seed; one in four has its own.
		if i%4 == 3 {
			w.seedOf[s] = uint64(100 + i)
		} else {
			w.seedOf[s] = 1
		}
	}
	for range npaths {
		n := 1 + w.rng.IntN(maxLen)
		p := make([]uint64, n)
		for j := range p {
			p[j] = uint64(1 + w.rng.IntN(3)) // few values: paths share prefixes
		}
		w.paths = append(w.paths, p)
	}
	return w
}

// engineHash is a source's engine hash for an identity: a function of its
// seed group, so sources of one group agree.
func (w *world) engineHash(src Source, seq uint64) uint64 {
	return kvhash.SequenceHash(w.seedOf[src], seq)
}

// randomOp returns an op for src that is valid most of the time.
func (w *world) randomOp(m *model, src Source) Op {
	ms := m.source(src)
	tier := kvevents.Tier(w.rng.IntN(numTiers))
	if w.rng.IntN(3) == 0 {
		tier = kvevents.TierDevice
	}
	switch r := w.rng.IntN(100); {
	case r < 70:
		p := w.paths[w.rng.IntN(len(w.paths))]
		seqs := kvhash.SequenceHashes(p)
		// Mostly extend what the source holds, as an engine does; else
		// start anywhere, which may name a parent the source lacks.
		k := 0
		if w.rng.IntN(4) == 0 {
			k = w.rng.IntN(len(p))
		} else {
			for k < len(p)-1 && ms.bySeq[seqs[k]] != nil {
				k++
			}
		}
		n := 1 + w.rng.IntN(len(p)-k)
		op := Op{Kind: OpStore, Tier: tier, Local: p[k : k+n], BlockSize: 4}
		if k > 0 {
			op.HasParent = true
			if h := ms.bySeq[seqs[k-1]]; h != nil && w.rng.IntN(10) > 0 {
				op.Parent = h.e
			} else {
				op.Parent = w.engineHash(src, seqs[k-1]) // may be unknown to src
			}
		}
		for j := k; j < k+n; j++ {
			e := w.engineHash(src, seqs[j])
			if w.rng.IntN(40) == 0 {
				e = uint64(w.rng.IntN(8)) // reuse: rehash and remap paths
			}
			op.Hashes = append(op.Hashes, e)
		}
		return op
	case r < 95:
		op := Op{Kind: OpRemove, Tier: tier}
		for _, h := range ms.bySeq {
			if w.rng.IntN(6) == 0 {
				op.Hashes = append(op.Hashes, h.e)
			}
		}
		op.Hashes = append(op.Hashes, uint64(w.rng.IntN(8)))
		return op
	default:
		return Op{Kind: OpClear, Tier: tier, AllTiers: w.rng.IntN(2) == 0}
	}
}

// queries returns every path and some random ones.
func (w *world) queries() [][]uint64 {
	q := slices.Clone(w.paths)
	for range 8 {
		p := make([]uint64, 1+w.rng.IntN(10))
		for j := range p {
			p[j] = uint64(1 + w.rng.IntN(3))
		}
		q = append(q, p)
	}
	return q
}

func compareAll(t *testing.T, what string, ix *Index, m *model, w *world) {
	t.Helper()
	// Most queries reuse one Matches, whose memory holds the previous
	// query's results: they must not leak into the next.
	var ms Matches
	for qi, q := range w.queries() {
		chains := qi%2 == 0
		got := ix.Match(q, MatchOptions{Chains: chains})
		if qi%3 != 0 {
			ix.MatchInto(&ms, q, MatchOptions{Chains: chains})
			got = ms.List
		}
		sameMatches(t, fmt.Sprintf("%s query %v", what, q), got, m.match(q, chains))
	}
	blocks, pairs := m.pairs()
	if st := ix.Stats(); st.Blocks != blocks || st.Pairs != pairs {
		t.Fatalf("%s: stats blocks %d pairs %d, model %d %d", what, st.Blocks, st.Pairs, blocks, pairs)
	}
	for _, a := range w.sources {
		for _, b := range w.sources {
			if a != b && ix.Conflict(a, b) != m.conflicts[conflictKey(a, b)] {
				t.Fatalf("%s: Conflict(%s, %s) = %v, model %v", what, a, b, ix.Conflict(a, b), !ix.Conflict(a, b))
			}
		}
	}
	checkInvariants(t, ix)
}

func TestModelRandom(t *testing.T) {
	runs := []struct {
		seed              uint64
		srcs, paths, plen int
		ops, every        int // compare with the model every that many ops
	}{
		{seed: 1, srcs: 3, paths: 6, plen: 5, ops: 3000, every: 50},
		{seed: 2, srcs: 6, paths: 12, plen: 8, ops: 3000, every: 50},
		{seed: 3, srcs: 9, paths: 20, plen: 12, ops: 3000, every: 50},
		{seed: 4, srcs: 4, paths: 40, plen: 3, ops: 3000, every: 50},
		// Enough sources for shared blocks to turn dense and back.
		{seed: 5, srcs: 150, paths: 6, plen: 6, ops: 5000, every: 500},
		// Requests of several of Match's windows.
		{seed: 6, srcs: 8, paths: 12, plen: 90, ops: 2000, every: 100},
		// Dense first blocks over longer prompts: a cohort whose members
		// change tiers, disagree on engine hashes and leave at many depths.
		{seed: 7, srcs: 130, paths: 4, plen: 24, ops: 5000, every: 250},
	}
	// Each run twice: tables on the heap, then mapped (bigmem.go), as a
	// big index's are.
	for _, r := range runs {
		for _, mapped := range []bool{false, true} {
			t.Run(fmt.Sprintf("seed%d/mapped=%v", r.seed, mapped), func(t *testing.T) {
				if mapped {
					defer lowerMapAt(t, 512)()
				}
				w := newWorld(r.seed, r.srcs, r.paths, r.plen)
				ix, err := New(Config{BlockSize: 4})
				if err != nil {
					t.Fatal(err)
				}
				m := newModel()
				for i := range r.ops {
					src := w.sources[w.rng.IntN(len(w.sources))]
					if w.rng.IntN(500) == 0 {
						ix.RemoveSource(src)
						m.removeSource(src)
						continue
					}
					op := w.randomOp(m, src)
					gotErr := ix.Apply(src, op)
					wantErr := m.apply(src, op)
					if !errors.Is(gotErr, wantErr) || (gotErr == nil) != (wantErr == nil) {
						t.Fatalf("op %d %+v: error %v, model %v", i, op, gotErr, wantErr)
					}
					if i%r.every == 0 {
						compareAll(t, fmt.Sprintf("op %d", i), ix, m, w)
					}
				}
				compareAll(t, "end", ix, m, w)
				if r.srcs > 100 && !hasDense(ix) {
					t.Fatalf("no holder set turned dense")
				}

				for _, src := range w.sources {
					if got, want := ix.Held(src), m.held(src); got != want {
						t.Fatalf("Held(%s) = %v, model %v", src, got, want)
					}
				}

				// Dump → rebuild gives identical matches.
				re, err := New(Config{BlockSize: 4})
				if err != nil {
					t.Fatal(err)
				}
				for _, src := range w.sources {
					if err := re.Apply(src, ix.Dump(src)...); err != nil {
						t.Fatalf("rebuild %s: %v", src, err)
					}
				}
				for _, q := range w.queries() {
					sameMatches(t, fmt.Sprintf("rebuilt %v", q), re.Match(q, MatchOptions{Chains: true}), m.match(q, true))
				}
				if a, b := ix.Stats(), re.Stats(); a.Blocks != b.Blocks || a.Pairs != b.Pairs {
					t.Fatalf("rebuilt stats %+v, original %+v", b, a)
				}
				checkInvariants(t, re)
				if mapped && ix.Stats().Mapped == 0 {
					t.Fatalf("no table mapped")
				}
			})
		}
	}
}
