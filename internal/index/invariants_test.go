package index

import (
	"slices"
	"testing"
)

func hasDense(ix *Index) bool {
	for i := range ix.shards {
		sh := &ix.shards[i]
		for j := range sh.dir {
			if sh.dir[j].seq != 0 && sh.isDense(sh.at(j)) {
				return true
			}
		}
	}
	return false
}

// checkInvariants verifies the index's internal structure: tables find every
// live node, holder blocks are sorted and unique, alt entries match flags,
// counters add up, and holders and engine-hash entries name each other.
func checkInvariants(t *testing.T, ix *Index) {
	t.Helper()
	blocks, pairs := 0, 0
	srcs := ix.reg.ids()
	refs := map[uint32]bool{}
	sets := map[uint32][]uint32{} // token: the holders of a node carrying it
	carriers := map[uint32]uint32{}
	for si := range ix.shards {
		sh := &ix.shards[si]
		sh.mu.RLock()
		live, alts := 0, 0
		for pos := range sh.dir {
			if sh.dir[pos].seq == 0 {
				continue
			}
			n := sh.at(pos)
			if n.seq != sh.dir[pos].seq {
				t.Fatalf("shard %d: entry %#x names the node of %#x", si, sh.dir[pos].seq, n.seq)
			}
			if refs[sh.dir[pos].ref] {
				t.Fatalf("shard %d: node %#x shares its ref", si, n.seq)
			}
			refs[sh.dir[pos].ref] = true
			live++
			c := sh.holderCount(n)
			if c == 0 {
				t.Fatalf("shard %d: node %#x without holders", si, n.seq)
			}
			if got, ok := sh.find(n.seq); !ok || got != pos {
				t.Fatalf("shard %d: node %#x at %d not found by the table", si, n.seq, pos)
			}
			if shardOf(n.seq) != uint32(si) {
				t.Fatalf("node in wrong shard")
			}
			ws := sh.appendHolders(nil, n)
			if n.meta&metaMore != 0 && fitsInline(ws) || sh.isDense(n) && c < sparseAt {
				t.Fatalf("holder block with %d holders %#x", c, ws)
			}
			if sh.isDense(n) && n.h1 != 0 {
				t.Fatalf("shard %d node %#x: dense holders with set token %d", si, n.seq, n.h1)
			}
			if n.meta&metaMore != 0 && !sh.isDense(n) {
				tok := n.h1
				if tok == 0 {
					t.Fatalf("shard %d node %#x: sparse holders without a set token", si, n.seq)
				}
				carriers[tok]++
				if set, ok := sets[tok]; ok && !slices.Equal(set, ws) {
					t.Fatalf("shard %d node %#x: token %d names sets %#x and %#x", si, n.seq, tok, set, ws)
				}
				sets[tok] = ws
			}
			if len(ws) != c {
				t.Fatalf("shard %d node %#x: count %d, %d holders", si, n.seq, c, len(ws))
			}
			if sh.isDense(n) {
				var fp uint64
				for _, w := range ws {
					fp += fpOf(w>>idShift, w&tierMask)
				}
				if got := sh.denseFP(n); got != fp {
					t.Fatalf("shard %d node %#x: fingerprint %#x, holders make %#x", si, n.seq, got, fp)
				}
			}
			var last uint32
			for i, w := range ws {
				id := w >> idShift
				if i > 0 && id <= last {
					t.Fatalf("shard %d node %#x: holders unsorted", si, n.seq)
				}
				last = id
				if w&tierMask == 0 {
					t.Fatalf("holder without tiers")
				}
				if w&altBit != 0 {
					alts++
					if n.meta&metaAlt == 0 {
						t.Fatalf("alt holder without node flag")
					}
					if _, ok := sh.alt[altKey{n.seq, id}]; !ok {
						t.Fatalf("alt holder without alt entry")
					}
				}
				s := srcs[id]
				if s == nil {
					t.Fatalf("holder of unknown source %d", id)
				}
				if seq, ok := s.engine.get(sh.engineOf(n, w)); !ok || seq != n.seq {
					t.Fatalf("holder %s without engine entry", s.key)
				}
			}
			pairs += c
		}
		if live != sh.live {
			t.Fatalf("shard %d: live %d, counted %d", si, sh.live, live)
		}
		if alts != len(sh.alt) {
			t.Fatalf("shard %d: %d alt holders, %d alt entries", si, alts, len(sh.alt))
		}
		blocks += live
		sh.mu.RUnlock()
	}
	checkTokens(t, ix, carriers)
	checkStore(t, ix, refs)
	if int64(blocks) != ix.blocks.Load() || int64(pairs) != ix.pairs.Load() {
		t.Fatalf("counters blocks %d pairs %d, counted %d %d", ix.blocks.Load(), ix.pairs.Load(), blocks, pairs)
	}
	held := int64(0)
	for _, s := range srcs {
		if s == nil {
			continue
		}
		held += s.held.Load()
		if s.engine.len() != int(s.held.Load()) {
			t.Fatalf("%s: %d engine entries, holds %d", s.key, s.engine.len(), s.held.Load())
		}
		for _, es := range s.engine.entries(nil) {
			e, seq := es.e, es.seq
			sh := &ix.shards[shardOf(seq)]
			sh.mu.RLock()
			_, _, ok := sh.holds(seq, s.id, e)
			sh.mu.RUnlock()
			if !ok {
				t.Fatalf("%s: stale engine entry %#x", s.key, e)
			}
		}
	}
	if held != int64(pairs) {
		t.Fatalf("sources hold %d, counted %d", held, pairs)
	}
}

// checkTokens verifies that every set token's references are its carriers
// (no op is under way, so no memo holds any) and that the free list holds
// exactly the others.
func checkTokens(t *testing.T, ix *Index, carriers map[uint32]uint32) {
	t.Helper()
	tk := &ix.tokens
	tk.mu.Lock()
	defer tk.mu.Unlock()
	free := map[uint32]bool{}
	for _, tok := range tk.free {
		if free[tok] || tok == 0 || tk.refs[tok] != 0 {
			t.Fatalf("token %d free twice, or free with %d references", tok, tk.refs[tok])
		}
		free[tok] = true
	}
	for tok := 1; tok < len(tk.refs); tok++ {
		if got, want := tk.refs[tok], carriers[uint32(tok)]; got != want {
			t.Fatalf("token %d: %d references, %d nodes carry it", tok, got, want)
		}
		if tk.refs[tok] == 0 && !free[uint32(tok)] {
			t.Fatalf("token %d unreferenced and not free", tok)
		}
	}
}

// checkStore verifies that the store's taken slots are exactly the nodes
// the directories name, and that every other slot is clear.
func checkStore(t *testing.T, ix *Index, refs map[uint32]bool) {
	t.Helper()
	st := &ix.nodes
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.live != len(refs) {
		t.Fatalf("store: %d live, directories name %d", st.live, len(refs))
	}
	runs := make([]uint8, len(st.runUsed))
	for ref := uint32(0); ref < st.bump; ref++ {
		if st.taken(ref) != refs[ref] {
			t.Fatalf("store: slot %d taken %v, named %v", ref, st.taken(ref), refs[ref])
		}
		if st.taken(ref) {
			runs[ref/runLen]++
		} else if *st.at(ref) != (node{}) {
			t.Fatalf("store: free slot %d not clear", ref)
		}
	}
	if !slices.Equal(runs, st.runUsed) {
		t.Fatalf("store: run counts %v, counted %v", st.runUsed, runs)
	}
}
