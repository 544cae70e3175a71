package tokenizer

import (
	"hash/maphash"
	"strings"
	"sync"
)

// wordCache remembers the ids of recently encoded pieces. Natural text
// repeats a few thousand words, so most pieces hit. It is sharded so that
// concurrent Encode calls rarely share a lock, and a full shard is emptied
// rather than frozen, so the cache follows a workload whose vocabulary
// drifts.
type wordCache struct {
	seed   maphash.Seed
	shards [cacheShards]cacheShard
}

const (
	cacheShards   = 16
	cacheShardCap = 1024
)

type cacheShard struct {
	mu sync.RWMutex
	m  map[string][]uint32
}

func newWordCache() *wordCache {
	c := &wordCache{seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].m = make(map[string][]uint32)
	}
	return c
}

func (c *wordCache) shard(w string) *cacheShard {
	return &c.shards[maphash.String(c.seed, w)%cacheShards]
}

// get returns the cached ids of w; the slice must not be modified.
func (c *wordCache) get(w string) ([]uint32, bool) {
	s := c.shard(w)
	s.mu.RLock()
	ids, ok := s.m[w]
	s.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(w string, ids []uint32) {
	s := c.shard(w)
	s.mu.Lock()
	if len(s.m) >= cacheShardCap {
		clear(s.m)
	}
	// w is usually a substring of a prompt; cloning it keeps the cache
	// from pinning whole prompts in memory.
	s.m[strings.Clone(w)] = ids
	s.mu.Unlock()
}
