// This file holds the word cache: the ids of recently encoded pieces, in lock-free sets.

package tokenizer

import (
	"hash/maphash"
	"strings"
	"sync/atomic"
)

// wordCache remembers the ids of recently encoded pieces; natural text
// repeats a few thousand words, so most pieces hit. It is a two-way
// set-associative table of atomic pointers: a lookup is one hash, two
// loads and a string comparison, with no lock for concurrent Encode calls
// to contend on, and a new word pushes out the older of its set, so the
// cache follows a workload whose vocabulary drifts.
type wordCache struct {
	seed maphash.Seed
	sets [cacheSets]cacheSet
}

const cacheSets = 1 << 12

// cacheSet holds the most recently stored word of the set in its first
// slot.
type cacheSet [2]atomic.Pointer[cacheEntry]

type cacheEntry struct {
	word string
	ids  []uint32 // shared: never modified
}

func newWordCache() *wordCache { return &wordCache{seed: maphash.MakeSeed()} }

func (c *wordCache) set(w string) *cacheSet {
	return &c.sets[maphash.String(c.seed, w)&(cacheSets-1)]
}

// get returns the cached ids of w and its set, for put on a miss; the ids
// must not be modified.
func (c *wordCache) get(w string) ([]uint32, *cacheSet) {
	s := c.set(w)
	for i := range s {
		if e := s[i].Load(); e != nil && e.word == w {
			return e.ids, s
		}
	}
	return nil, s
}

// put stores ids for w in its set. w is usually a substring of a prompt;
// cloning it keeps the cache from pinning whole prompts in memory.
// Concurrent puts may drop an entry; that only costs a later miss.
func (c *wordCache) put(s *cacheSet, w string, ids []uint32) {
	s[1].Store(s[0].Load())
	s[0].Store(&cacheEntry{word: strings.Clone(w), ids: ids})
}

// shortCache is wordCache for pieces of at most maxShortWord bytes, which
// are most pieces of most text (" the", " quick", ","): the piece itself,
// with its length, is the key, so a lookup is a multiplication, a load and
// a comparison of two integers, with no string hashed or compared.
type shortCache struct {
	sets [shortSets]cacheSetShort
}

const (
	shortBits    = 14
	shortSets    = 1 << shortBits
	maxShortWord = 7
)

type cacheSetShort [2]atomic.Pointer[shortEntry]

type shortEntry struct {
	key uint64
	ids []uint32 // shared: never modified
}

// shortKey packs a piece of at most maxShortWord bytes and its length into
// an integer that no other such piece has.
func shortKey(w string) uint64 {
	k := uint64(len(w)) << 56
	for i := 0; i < len(w); i++ {
		k |= uint64(w[i]) << (8 * i)
	}
	return k
}

func (c *shortCache) set(k uint64) *cacheSetShort {
	return &c.sets[(k*0x9e3779b97f4a7c15)>>(64-shortBits)]
}

func (c *shortCache) get(k uint64) ([]uint32, *cacheSetShort) {
	s := c.set(k)
	for i := range s {
		if e := s[i].Load(); e != nil && e.key == k {
			return e.ids, s
		}
	}
	return nil, s
}

func (c *shortCache) put(s *cacheSetShort, k uint64, ids []uint32) {
	s[1].Store(s[0].Load())
	s[0].Store(&shortEntry{key: k, ids: ids})
}
