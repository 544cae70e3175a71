// This file holds the catalog of a DP rank's blocks: tokens and parent, for runner-owned events.

package mocker

import "sync"

// blockMeta is what a BlockStored event says about a block besides its hash.
type blockMeta struct {
	parent    uint64
	hasParent bool
	tokens    []uint32
	salt      string
	lora      string
}

// catalog remembers the tokens and parent of every block a DP rank holds
// somewhere, because the runner's inventory reports only keys while a
// runner-owned BlockStored event must carry the same token ids and parent as
// a GPU one. An entry lives while a holder has it: a request working on it,
// or a runner shard holding it; holders are bits, so a repeated or missed
// report cannot unbalance a count.
type catalog struct {
	mu sync.Mutex
	m  map[uint64]*catalogEntry
}

type catalogEntry struct {
	meta   blockMeta
	pins   int    // requests working on the block
	shards uint64 // bit t: TP shard t's runner holds it
}

func newCatalog() *catalog { return &catalog{m: make(map[uint64]*catalogEntry)} }

// pin records the blocks of a request's chain while it works on them.
func (c *catalog) pin(seq *Seq, bs int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, k := range seq.Keys {
		e := c.m[k]
		if e == nil {
			e = &catalogEntry{meta: blockMeta{tokens: append([]uint32(nil), seq.Tokens[i*bs:(i+1)*bs]...), salt: seq.Salt, lora: seq.LoRA}}
			if i > 0 {
				e.meta.parent, e.meta.hasParent = seq.Keys[i-1], true
			}
			c.m[k] = e
		}
		e.pins++
	}
}

func (c *catalog) unpin(keys []uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range keys {
		if e := c.m[k]; e != nil {
			e.pins--
			c.drop(k, e)
		}
	}
}

// stored marks keys held by shard and returns their metadata; ok[i] is false
// for a key nobody described (it cannot be reported with its tokens).
func (c *catalog) stored(shard int, keys []uint64) ([]blockMeta, []bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	metas := make([]blockMeta, len(keys))
	ok := make([]bool, len(keys))
	for i, k := range keys {
		if e := c.m[k]; e != nil {
			e.shards |= 1 << shard
			metas[i], ok[i] = e.meta, true
		}
	}
	return metas, ok
}

func (c *catalog) removed(shard int, keys []uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range keys {
		if e := c.m[k]; e != nil {
			e.shards &^= 1 << shard
			c.drop(k, e)
		}
	}
}

func (c *catalog) drop(k uint64, e *catalogEntry) {
	if e.pins <= 0 && e.shards == 0 {
		delete(c.m, k)
	}
}

func (c *catalog) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// fold records that shard stored (or removed) keys and returns the keys
// whose holding by all of tp shards changed: stores that complete the set,
// removals that break it. Removals also release the shard's hold.
func (c *catalog) fold(shard int, keys []uint64, removed bool, tp int) []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	all := uint64(1)<<tp - 1
	var changed []uint64
	for _, k := range keys {
		e := c.m[k]
		if e == nil {
			continue
		}
		before := e.shards
		if removed {
			e.shards &^= 1 << shard
		} else {
			e.shards |= 1 << shard
		}
		if (before == all) != (e.shards == all) {
			changed = append(changed, k)
		}
		if removed {
			c.drop(k, e)
		}
	}
	return changed
}
