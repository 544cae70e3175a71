package index

import (
	"fmt"
	"testing"

	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvhash"
)

// tokensAlong returns the set token of each block of the chain of local
// hashes, 0 for inline holders.
func tokensAlong(t *testing.T, ix *Index, local []uint64) []uint32 {
	t.Helper()
	var out []uint32
	for _, seq := range kvhash.SequenceHashes(local) {
		seq = ident(seq)
		sh := &ix.shards[shardOf(seq)]
		pos, ok := sh.find(seq)
		if !ok {
			t.Fatalf("block %#x not indexed", seq)
		}
		n := sh.at(pos)
		tok := uint32(0)
		if n.meta&metaMore != 0 {
			tok = n.h1
		}
		out = append(out, tok)
	}
	return out
}

// runs returns the lengths of the runs of equal tokens.
func runs(toks []uint32) []int {
	var out []int
	for i, tok := range toks {
		if i > 0 && tok == toks[i-1] {
			out[len(out)-1]++
			continue
		}
		out = append(out, 1)
	}
	return out
}

// TestSetTokens follows the tokens of a shared prefix as sources store,
// shorten and leave it: blocks whose holder sets a writer changed alike
// share one token, so that Match loads one set for the run, and blocks
// whose sets differ never share one (checkInvariants verifies that over
// the whole index).
func TestSetTokens(t *testing.T) {
	ix, err := New(Config{BlockSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	local := make([]uint64, 16)
	for i := range local {
		local[i] = uint64(1000 + i)
	}
	src := func(i int) Source { return WorkerRank(fmt.Sprintf("w%d", i), 0) }
	apply := func(s Source, op Op) {
		t.Helper()
		if err := ix.Apply(s, op); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		what string
		do   func()
		runs string // lengths of the runs of equal tokens along the prefix
	}{
		{"three sources: inline, no tokens", func() {
			for i := range 3 {
				apply(src(i), root(kvevents.TierDevice, local...))
			}
		}, "[16]"},
		{"a fourth moves every set to the arena, one token", func() {
			apply(src(3), root(kvevents.TierDevice, local...))
		}, "[16]"},
		{"a fifth holds half the prefix", func() {
			apply(src(4), root(kvevents.TierDevice, local[:8]...))
		}, "[8 8]"},
		{"the first drops the last four blocks: inline again", func() {
			apply(src(0), remove(kvevents.TierDevice, engines(100, local[12:])...))
		}, "[8 4 4]"},
		{"the second moves blocks 4 to 11 to the host tier", func() {
			apply(src(1), remove(kvevents.TierDevice, engines(100, local[4:12])...))
			apply(src(1), root(kvevents.TierHost, local[:12]...))
		}, "[4 4 4 4]"},
		{"a sixth stores the whole prefix, then leaves", func() {
			apply(src(5), root(kvevents.TierDevice, local...))
			ix.RemoveSource(src(5)) // in the engine table's order
		}, "[4 4 4 4]"},
	}
	for i, st := range steps {
		st.do()
		toks := tokensAlong(t, ix, local)
		if inline := toks[0] == 0; inline != (i == 0) {
			t.Fatalf("%s: tokens %v", st.what, toks)
		}
		if got := fmt.Sprint(runs(toks)); got != st.runs {
			t.Errorf("%s: runs of equal tokens %v, want %v (tokens %v)", st.what, got, st.runs, toks)
		}
		checkInvariants(t, ix)
	}
	// Block 12 on: sources 1 to 3, inline.
	if toks := tokensAlong(t, ix, local); toks[12] != 0 {
		t.Errorf("tokens %v: the last four blocks' holders should be inline", toks)
	}
}
