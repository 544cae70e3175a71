package ingest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"kvrouter/internal/index"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvhash"
)

// tree is a small prefix tree of blocks named by letters: each block has
// a parent ("" for a root), its own tokens and an engine hash.
type tree struct {
	bs     int
	parent map[string]string
	tokens map[string][]uint32
	engine map[string]uint64
}

// newTree builds blocks from "name:parent" specs ("A:" is a root).
func newTree(bs int, specs ...string) *tree {
	t := &tree{bs: bs, parent: map[string]string{}, tokens: map[string][]uint32{}, engine: map[string]uint64{}}
	for i, s := range specs {
		name, parent, _ := strings.Cut(s, ":")
		t.parent[name] = parent
		toks := make([]uint32, bs)
		for j := range toks {
			toks[j] = uint32(1000*(i+1) + j)
		}
		t.tokens[name] = toks
		t.engine[name] = uint64(0xe000 + i)
	}
	return t
}

// storeOp stores a run of blocks, the first under its tree parent.
func (t *tree) storeOp(tier kvevents.Tier, names ...string) index.Op {
	op := index.Op{Kind: index.OpStore, Tier: tier, BlockSize: t.bs}
	if p := t.parent[names[0]]; p != "" {
		op.Parent, op.HasParent = t.engine[p], true
	}
	for _, n := range names {
		op.Hashes = append(op.Hashes, t.engine[n])
		op.Local = append(op.Local, kvhash.LocalHashes(t.tokens[n], t.bs, kvhash.Seed)...)
	}
	return op
}

func (t *tree) removeOp(tier kvevents.Tier, names ...string) index.Op {
	op := index.Op{Kind: index.OpRemove, Tier: tier}
	for _, n := range names {
		op.Hashes = append(op.Hashes, t.engine[n])
	}
	return op
}

// seq is a block's identity: the rolling hash of its whole prefix.
func (t *tree) seq(name string) (uint64, uint32) { return t.saltedSeq(name, "") }

// saltedSeq is the identity of a block whose whole prefix is hashed with
// salt, as the router hashes a salted request.
func (t *tree) saltedSeq(name, salt string) (uint64, uint32) {
	var chain []string
	for n := name; n != ""; n = t.parent[n] {
		chain = append([]string{n}, chain...)
	}
	var local []uint64
	for _, n := range chain {
		local = append(local, kvhash.LocalHashes(t.tokens[n], t.bs, kvhash.SeedFor("", salt))...)
	}
	seqs := kvhash.SequenceHashes(local)
	return seqs[len(seqs)-1], uint32(len(chain) - 1)
}

// dumpSet renders an owner's residency in an index as sorted
// "name@tier" words, checking each block's identity and depth.
func (t *tree) dumpSet(tb testing.TB, ix *index.Index, src index.Source) string {
	tb.Helper()
	byHash := map[uint64]string{}
	for n, e := range t.engine {
		byHash[e] = n
	}
	var out []string
	for _, op := range ix.Dump(src) {
		for i, e := range op.Hashes {
			n := byHash[e]
			seq, depth := t.seq(n)
			if op.Seqs[i] != seq || op.Depths[i] != depth {
				tb.Errorf("%s@%d held with identity %#x depth %d, want %#x depth %d", n, op.Tier, op.Seqs[i], op.Depths[i], seq, depth)
			}
			out = append(out, fmt.Sprintf("%s@%d", n, op.Tier))
		}
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}
