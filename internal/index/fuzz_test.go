package index

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"testing"

	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvhash"
)

// FuzzOpFromEvent feeds arbitrary decoded-event fields through OpFromEvent
// and Apply. A store the index accepts at the root must then match its own
// tokens to its full length, under its salt only.
func FuzzOpFromEvent(f *testing.F) {
	f.Add(uint8(1), uint8(4), []byte{1, 0, 2, 0, 3, 0, 4, 0}, uint8(1), uint64(0), false, "", "", uint8(0), false)
	f.Add(uint8(1), uint8(2), []byte{1, 0, 2, 0, 3, 0, 4, 0}, uint8(2), uint64(9), true, "tenant-a", "sql", uint8(1), false)
	f.Add(uint8(1), uint8(0), []byte{}, uint8(1), uint64(0), false, "", "", uint8(2), true)
	f.Add(uint8(2), uint8(0), []byte{}, uint8(3), uint64(0), false, "", "", uint8(3), false)
	f.Add(uint8(3), uint8(0), []byte{}, uint8(0), uint64(0), false, "", "", uint8(9), false)
	f.Fuzz(func(t *testing.T, kind, blockSize uint8, tokenBytes []byte, nhashes uint8, parent uint64, hasParent bool,
		salt, lora string, tier uint8, placeholder bool) {
		tokens := make([]uint32, len(tokenBytes)/2)
		for i := range tokens {
			tokens[i] = uint32(binary.LittleEndian.Uint16(tokenBytes[2*i:]))
		}
		hashes := make([]uint64, nhashes%16)
		for i := range hashes {
			hashes[i] = uint64(i) * 0x9e3779b97f4a7c15
		}
		ev := kvevents.Event{
			Kind: kvevents.Kind(kind % 5), BlockHashes: hashes, ParentHash: parent, HasParent: hasParent,
			TokenIDs: tokens, BlockSize: int(blockSize % 9), LoRAName: lora, CacheSalt: salt,
			Tier: kvevents.Tier(tier % 6), Placeholder: placeholder,
		}
		op, err := OpFromEvent(ev)
		if err != nil {
			return
		}
		bs := max(ev.BlockSize, 1)
		ix, _ := New(Config{BlockSize: bs})
		err = ix.Apply(w0, op)
		checkInvariants(t, ix)
		if err != nil || op.Kind != OpStore || op.HasParent || len(hashes) == 0 || len(slices.Compact(slices.Clone(hashes))) != len(hashes) {
			return
		}
		local := kvhash.LocalHashes(tokens, bs, kvhash.SeedFor(lora, salt))
		got := ix.Match(local, MatchOptions{Chains: true})
		if len(got) != 1 || int(got[0].Depth) != len(hashes) || !slices.Equal(got[0].Chain, hashes) {
			t.Fatalf("stored %d blocks, matched %+v", len(hashes), got)
		}
		other := kvhash.LocalHashes(tokens, bs, kvhash.SeedFor(lora, salt+"x"))
		if got := ix.Match(other, MatchOptions{}); len(got) != 0 {
			t.Fatalf("matched across cache salts: %+v", got)
		}
	})
}

// FuzzModel decodes a sequence of ops from bytes, applies it to the index
// and to the brute-force model, and compares errors, every match, stats,
// conflicts and a rebuild from dumps.
func FuzzModel(f *testing.F) {
	f.Add([]byte{0x00, 3, 1, 2, 3, 0, 0, 0})
	f.Add([]byte{0x01, 2, 1, 1, 9, 0, 0x05, 2, 2, 3, 1, 0, 0, 0x02, 5, 0x13})
	f.Add([]byte{0x10, 4, 3, 3, 3, 3, 0, 1, 2, 3, 0x21, 2, 3, 1, 4, 0, 1, 0x0e, 0x30, 0x03})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := byteReader(data)
		srcs := []Source{w0, w1, w2, o1}
		ix, _ := New(Config{BlockSize: 4})
		m := newModel()
		paths := map[uint64][]uint64{} // identity → its local hashes from the root
		for ops := 0; len(r) > 0 && ops < 64; ops++ {
			c := r.next()
			src := srcs[c%4]
			tier := kvevents.Tier(c >> 4 % 4)
			var op Op
			switch c >> 2 % 4 {
			case 0, 1:
				op = fuzzStore(&r, m.source(src), src, tier, paths)
			case 2:
				op = Op{Kind: OpRemove, Tier: tier}
				held := heldSeqs(m.source(src))
				for n := r.next() % 4; n > 0; n-- {
					if b := r.next(); len(held) > 0 && b%8 != 0 {
						op.Hashes = append(op.Hashes, m.source(src).bySeq[held[int(b)%len(held)]].e)
					} else {
						op.Hashes = append(op.Hashes, uint64(b))
					}
				}
			default:
				op = Op{Kind: OpClear, Tier: tier, AllTiers: c&0x40 != 0}
			}
			gotErr, wantErr := ix.Apply(src, op), m.apply(src, op)
			if !errors.Is(gotErr, wantErr) || (gotErr == nil) != (wantErr == nil) {
				t.Fatalf("op %d %+v: error %v, model %v", ops, op, gotErr, wantErr)
			}
		}
		checkInvariants(t, ix)
		var queries [][]uint64
		for _, p := range paths {
			queries = append(queries, p)
		}
		slices.SortFunc(queries, slices.Compare)
		for _, q := range queries {
			sameMatches(t, fmt.Sprint(q), ix.Match(q, MatchOptions{Chains: true}), m.match(q, true))
		}
		blocks, pairs := m.pairs()
		if st := ix.Stats(); st.Blocks != blocks || st.Pairs != pairs {
			t.Fatalf("stats %d blocks %d pairs, model %d %d", st.Blocks, st.Pairs, blocks, pairs)
		}
		for _, a := range srcs {
			for _, b := range srcs {
				if a != b && ix.Conflict(a, b) != m.conflicts[conflictKey(a, b)] {
					t.Fatalf("Conflict(%s, %s) = %v", a, b, ix.Conflict(a, b))
				}
			}
		}
		re, _ := New(Config{BlockSize: 4})
		for _, src := range srcs {
			if err := re.Apply(src, ix.Dump(src)...); err != nil {
				t.Fatal(err)
			}
		}
		for _, q := range queries {
			sameMatches(t, fmt.Sprint("rebuilt ", q), re.Match(q, MatchOptions{Chains: true}), m.match(q, true))
		}
	})
}

type byteReader []byte

func (r *byteReader) next() byte {
	if len(*r) == 0 {
		return 0
	}
	c := (*r)[0]
	*r = (*r)[1:]
	return c
}

func heldSeqs(ms *modelSource) []uint64 {
	held := make([]uint64, 0, len(ms.bySeq))
	for seq := range ms.bySeq {
		held = append(held, seq)
	}
	slices.SortFunc(held, cmp.Compare)
	return held
}

// fuzzStore decodes a store: its parent (none, one the source holds, or a
// raw hash), 1-6 blocks over a three-letter alphabet, and engine hashes
// that mostly follow the source's seed group.
func fuzzStore(r *byteReader, ms *modelSource, src Source, tier kvevents.Tier, paths map[uint64][]uint64) Op {
	op := Op{Kind: OpStore, Tier: tier}
	var prefix []uint64
	var prev uint64
	chained := false
	held := heldSeqs(ms)
	switch b := r.next(); {
	case b%4 == 0 || len(held) == 0 && b%4 != 3:
	case b%4 == 3: // a raw parent hash, most likely unknown to the source
		op.Parent, op.HasParent = uint64(r.next()), true
	default:
		prev, chained = held[int(r.next())%len(held)], true
		op.Parent, op.HasParent = ms.bySeq[prev].e, true
		prefix = paths[prev]
	}
	seed := uint64(1)
	if src == w1 {
		seed = 2 // w1 hashes with another seed: conflicts
	}
	for n := 1 + int(r.next()%6); n > 0; n-- {
		l := uint64(1 + r.next()%3)
		op.Local = append(op.Local, l)
		seq := l
		if chained {
			seq = kvhash.SequenceHash(prev, l)
		}
		prev, chained = seq, true
		prefix = append(slices.Clip(prefix), l)
		if _, ok := paths[seq]; !ok {
			paths[seq] = prefix
		}
		e := kvhash.SequenceHash(seed, seq)
		if r.next()%16 == 0 {
			e = uint64(r.next() % 8) // reused hashes: rehash and remap paths
		}
		op.Hashes = append(op.Hashes, e)
	}
	return op
}
