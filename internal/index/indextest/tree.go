// Package indextest gives the tests of the packages that feed an index a
// small prefix tree of named blocks: the ops that store and remove them,
// their identities, and an index's dump rendered by block name.
package indextest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"kvrouter/internal/index"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvhash"
)

// Tree is a small prefix tree of blocks named by letters: each block has a
// parent ("" for a root), its own BlockSize tokens and an engine hash. Tests
// may change the maps, e.g. give two blocks one engine hash.
type Tree struct {
	BlockSize int
	Parent    map[string]string
	Tokens    map[string][]uint32
	Engine    map[string]uint64
}

// NewTree builds blocks from "name:parent" specs ("A:" is a root). Block i
// gets the tokens 1000*(i+1), 1000*(i+1)+1, ... and engine hash 0xe000+i.
func NewTree(bs int, specs ...string) *Tree {
	t := &Tree{BlockSize: bs, Parent: map[string]string{}, Tokens: map[string][]uint32{}, Engine: map[string]uint64{}}
	for i, s := range specs {
		name, parent, _ := strings.Cut(s, ":")
		t.Parent[name] = parent
		toks := make([]uint32, bs)
		for j := range toks {
			toks[j] = uint32(1000*(i+1) + j)
		}
		t.Tokens[name] = toks
		t.Engine[name] = uint64(0xe000 + i)
	}
	return t
}

// StoreOp stores a run of blocks, the first under its tree parent.
func (t *Tree) StoreOp(tier kvevents.Tier, names ...string) index.Op {
	op := index.Op{Kind: index.OpStore, Tier: tier, BlockSize: t.BlockSize}
	if p := t.Parent[names[0]]; p != "" {
		op.Parent, op.HasParent = t.Engine[p], true
	}
	for _, n := range names {
		op.Hashes = append(op.Hashes, t.Engine[n])
		op.Local = append(op.Local, kvhash.LocalHashes(t.Tokens[n], t.BlockSize, kvhash.Seed)...)
	}
	return op
}

// RemoveOp removes blocks from tier.
func (t *Tree) RemoveOp(tier kvevents.Tier, names ...string) index.Op {
	op := index.Op{Kind: index.OpRemove, Tier: tier}
	for _, n := range names {
		op.Hashes = append(op.Hashes, t.Engine[n])
	}
	return op
}

// Seq is a block's identity, the rolling hash of its whole prefix, and its
// depth.
func (t *Tree) Seq(name string) (uint64, uint32) { return t.SaltedSeq(name, "") }

// SaltedSeq is the identity of a block whose whole prefix is hashed with
// salt, as the router hashes a salted request.
func (t *Tree) SaltedSeq(name, salt string) (uint64, uint32) {
	var chain []string
	for n := name; n != ""; n = t.Parent[n] {
		chain = append([]string{n}, chain...)
	}
	var local []uint64
	for _, n := range chain {
		local = append(local, kvhash.LocalHashes(t.Tokens[n], t.BlockSize, kvhash.SeedFor("", salt))...)
	}
	seqs := kvhash.SequenceHashes(local)
	return seqs[len(seqs)-1], uint32(len(chain) - 1)
}

// DumpSet renders src's residency in ix as sorted "name@tier" words,
// checking each block's identity and depth.
func (t *Tree) DumpSet(tb testing.TB, ix *index.Index, src index.Source) string {
	tb.Helper()
	byHash := map[uint64]string{}
	for n, e := range t.Engine {
		byHash[e] = n
	}
	var out []string
	for _, op := range ix.Dump(src) {
		for i, e := range op.Hashes {
			n := byHash[e]
			seq, depth := t.Seq(n)
			if op.Seqs[i] != seq || op.Depths[i] != depth {
				tb.Errorf("%s@%d held with identity %#x depth %d, want %#x depth %d", n, op.Tier, op.Seqs[i], op.Depths[i], seq, depth)
			}
			out = append(out, fmt.Sprintf("%s@%d", n, op.Tier))
		}
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}
