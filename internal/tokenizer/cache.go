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
