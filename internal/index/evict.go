// This file holds recency and eviction: the memory budget, the caps and what is dropped first.

package index

// Recency: Match advances a logical clock; a node's stamp is the epoch
// (1<<epochShift matches) of the last match that walked through it. Coarse
// epochs spare hot nodes a store on most matches.
const (
	epochShift = 4
	rebaseAt   = 1 << 31 // epochs past this are moved down by rebaseBy
	rebaseBy   = 1 << 30
)

// evictKey orders nodes for eviction: least recent first and, at equal
// recency, deepest first. Since a block is never more recent than its
// ancestors (stores inherit the parent's stamp, matches touch whole
// prefixes), evicting in this order takes a block's descendants with it.
func evictKey(n *node) uint64 {
	return uint64(n.loadStamp())<<32 | uint64(maxDepth-n.depth())
}

// Memory per block and per (block, source) pair, heap plus mapped tables,
// fitted to indexes of 256,000 blocks in chains of 64 held by 1, 2, 4 and
// 16 sources (98, 131, 225 and 739 bytes per block measured) and rounded
// up, so the estimate is at or above the measured memory at every count.
// With the sharing of the index benchmark (docs/benchmarks.md: 67.4 bytes
// per pair) it overestimates too.
const (
	BytesPerBlock = 60
	BytesPerPair  = 45
)

// EstimateBytes is the memory an index of blocks block identities and
// pairs (block, source) pairs takes, by BytesPerBlock and BytesPerPair.
func EstimateBytes(blocks, pairs int64) int64 {
	return blocks*BytesPerBlock + pairs*BytesPerPair
}

// DefaultMaxBytes is the index memory budget of a process that may use
// available bytes and whose collector lets the heap grow to (1 +
// gcPercent/100) × the live heap between collections (GOGC; negative, for
// off, counts as Go's default 100). The index is most of a router's live
// heap, so the budget gives the router's peak heap half the memory and
// leaves the other half to the rest of the machine: available / 2 /
// (1 + gcPercent/100), a tenth of it at the router's GOGC of 400.
func DefaultMaxBytes(available int64, gcPercent int) int64 {
	if gcPercent < 0 {
		gcPercent = 100
	}
	if available <= 0 {
		return 0
	}
	return max(1, available/2*100/int64(100+gcPercent))
}

// evictCount is how many blocks to evict from an index of blocks blocks and
// pairs pairs to bring it to 15/16 of whichever caps it exceeds (0: no
// cap), or 0 when it exceeds none. For the memory cap it assumes the
// evicted blocks are held as widely as the average one; if they are held
// less, the next Apply evicts again.
func evictCount(blocks, pairs int64, maxBlocks int, maxBytes int64) int {
	k := int64(0)
	if maxBlocks > 0 && blocks > int64(maxBlocks) {
		k = blocks - (int64(maxBlocks) - int64(maxBlocks)/16)
	}
	if est := EstimateBytes(blocks, pairs); maxBytes > 0 && est > maxBytes && blocks > 0 {
		low := maxBytes - maxBytes/16
		// Ceiling of the excess over the average block's bytes.
		k = max(k, min(blocks, ((est-low)*blocks+est-1)/est))
	}
	return int(k)
}

func (ix *Index) maybeEvict() {
	if evictCount(ix.blocks.Load(), ix.pairs.Load(), ix.maxBlocks, ix.maxBytes) <= 0 {
		return
	}
	if !ix.evictMu.TryLock() {
		return // another writer is evicting
	}
	defer ix.evictMu.Unlock()
	// A pass for the memory cap evicts as many blocks as the average
	// block's bytes say; blocks held by fewer sources than average free
	// less, so go again while still over (rarely more than twice).
	for ix.evict() {
	}
}

type staleEntry struct {
	seq, e uint64
}

// evict drops the least recent blocks down to 15/16 of the caps: evicting
// in batches keeps the sweep's cost per inserted block constant.
// It reports whether it evicted anything.
func (ix *Index) evict() bool {
	k := evictCount(ix.blocks.Load(), ix.pairs.Load(), ix.maxBlocks, ix.maxBytes)
	if k <= 0 {
		return false
	}
	keys := make([]uint64, 0, ix.blocks.Load()+64)
	for i := range ix.shards {
		sh := &ix.shards[i]
		sh.mu.RLock()
		for j := range sh.dir {
			if sh.dir[j].seq != 0 {
				keys = append(keys, evictKey(sh.at(j)))
			}
		}
		sh.mu.RUnlock()
	}
	if len(keys) == 0 {
		return false
	}
	k = min(k, len(keys))
	th := selectKth(keys, k-1)
	below := 0
	for _, key := range keys {
		if key < th {
			below++
		}
	}
	atTh := k - below // how many of the nodes at the threshold go

	stale := make(map[*source][]staleEntry)
	dropped := 0
	for i := range ix.shards {
		sh := &ix.shards[i]
		sh.mu.Lock()
		// The sources are read with the shard locked: every holder in it
		// was added by a source registered before, and a removed source's
		// number is only reused once its holders are gone, so each holder
		// word names the source it belongs to. (A list read once, before,
		// missed sources registered meanwhile and left their counts high.)
		srcs := ix.reg.ids()
		// Freeing shifts later entries back into the hole: look at the same
		// position again. Entries only ever move to positions not yet passed.
		for j := 0; j < len(sh.dir); {
			if sh.dir[j].seq == 0 {
				j++
				continue
			}
			n := sh.at(j)
			key := evictKey(n)
			if key > th || key == th && atTh <= 0 {
				j++
				continue
			}
			if key == th {
				atTh--
			}
			ix.dropNode(sh, j, srcs, stale)
			dropped++
		}
		sh.mu.Unlock()
	}

	// Engine-hash entries naming evicted nodes are stale now; clean them
	// under each source's own lock, re-checking, since the source may have
	// stored the block again meanwhile.
	for s, list := range stale {
		s.mu.Lock()
		if !s.gone {
			for _, se := range list {
				if seq, _ := s.engine.get(se.e); seq != se.seq {
					continue
				}
				sh := &ix.shards[shardOf(se.seq)]
				sh.mu.RLock()
				_, _, held := sh.holds(se.seq, s.id, se.e)
				sh.mu.RUnlock()
				if !held {
					s.engine.del(se.e)
				}
			}
		}
		s.mu.Unlock()
	}
	return dropped > 0
}

// dropNode removes every holder of the node at pos and frees it.
func (ix *Index) dropNode(sh *shard, pos int, srcs []*source, stale map[*source][]staleEntry) {
	n := sh.at(pos)
	sh.tmp = sh.appendHolders(sh.tmp[:0], n)
	for _, w := range sh.tmp {
		id := w >> idShift
		if int(id) < len(srcs) && srcs[id] != nil {
			s := srcs[id]
			s.held.Add(-1)
			stale[s] = append(stale[s], staleEntry{n.seq, sh.engineOf(n, w)})
		}
		if w&altBit != 0 {
			delete(sh.alt, altKey{n.seq, id})
		}
		ix.pairs.Add(-1)
	}
	if n.meta&metaMore != 0 {
		sh.release(n.h0)
		ix.dropToken(n)
	}
	sh.freeNode(pos)
	ix.blocks.Add(-1)
	ix.evicted.Add(1)
}

// rebase moves every stamp down by rebaseBy epochs before they overflow.
func (ix *Index) rebase() {
	ix.evictMu.Lock()
	defer ix.evictMu.Unlock()
	if (ix.clock.Load()-ix.base.Load())>>epochShift < rebaseAt {
		return // someone else did
	}
	ix.base.Add(rebaseBy << epochShift)
	for i := range ix.shards {
		sh := &ix.shards[i]
		sh.mu.Lock()
		for j := range sh.dir {
			if sh.dir[j].seq != 0 {
				n := sh.at(j)
				n.stamp = max(n.stamp, rebaseBy) - rebaseBy
			}
		}
		sh.mu.Unlock()
	}
}

// selectKth returns the k-th smallest key (0-based), reordering keys.
func selectKth(keys []uint64, k int) uint64 {
	lo, hi := 0, len(keys)-1
	for lo < hi {
		// Median of three against sorted or constant runs.
		mid := lo + (hi-lo)/2
		if keys[mid] < keys[lo] {
			keys[mid], keys[lo] = keys[lo], keys[mid]
		}
		if keys[hi] < keys[lo] {
			keys[hi], keys[lo] = keys[lo], keys[hi]
		}
		if keys[hi] < keys[mid] {
			keys[hi], keys[mid] = keys[mid], keys[hi]
		}
		pivot := keys[mid]
		i, j := lo, hi
		for i <= j {
			for keys[i] < pivot {
				i++
			}
			for keys[j] > pivot {
				j--
			}
			if i <= j {
				keys[i], keys[j] = keys[j], keys[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return keys[k]
		}
	}
	return keys[k]
}
