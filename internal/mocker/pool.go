// This file holds a DP rank's GPU block pool: bytes, prefix cache and LRU eviction.

package mocker

// gpuPool is one DP rank's GPU KV cache: fixed blocks with their bytes,
// reference counts, and a prefix cache from engine block hash to block.
// A block is in one of three states: referenced by running sequences
// (ref > 0, maybe cached), cached and unreferenced (evictable, on the LRU
// list), or free. Allocation takes a free block first and otherwise evicts
// the least recently released cached block, as vLLM and SGLang do.
type gpuPool struct {
	blockBytes int
	mem        []byte
	ref        []int32
	key        []uint64
	cached     []bool
	index      map[uint64]int
	free       []int
	// LRU list of cached unreferenced blocks, intrusive; head is evicted
	// first. -1 ends the list.
	prev, next []int
	head, tail int
	lruLen     int
}

func newGPUPool(blocks, blockBytes int) *gpuPool {
	p := &gpuPool{
		blockBytes: blockBytes,
		mem:        make([]byte, blocks*blockBytes),
		ref:        make([]int32, blocks),
		key:        make([]uint64, blocks),
		cached:     make([]bool, blocks),
		index:      make(map[uint64]int),
		free:       make([]int, blocks),
		prev:       make([]int, blocks),
		next:       make([]int, blocks),
		head:       -1,
		tail:       -1,
	}
	for i := range p.free {
		// Pop from the end hands out block 0 first.
		p.free[i] = blocks - 1 - i
		p.prev[i], p.next[i] = -1, -1
	}
	return p
}

func (p *gpuPool) total() int { return len(p.ref) }

// available is how many blocks an allocation can get: free ones plus
// cached ones nobody references.
func (p *gpuPool) available() int { return len(p.free) + p.lruLen }

// used is the number of blocks referenced by sequences.
func (p *gpuPool) used() int { return p.total() - p.available() }

// cachedCount is the number of blocks in the prefix cache.
func (p *gpuPool) cachedCount() int { return len(p.index) }

func (p *gpuPool) bytes(id int) []byte {
	return p.mem[id*p.blockBytes : (id+1)*p.blockBytes]
}

func (p *gpuPool) lookup(key uint64) (int, bool) {
	id, ok := p.index[key]
	return id, ok
}

// acquire references block id, taking it off the LRU list.
func (p *gpuPool) acquire(id int) {
	if p.ref[id] == 0 && p.cached[id] {
		p.unlink(id)
	}
	p.ref[id]++
}

// release drops one reference; the last one parks a cached block on the LRU
// list and returns any other block to the free list.
func (p *gpuPool) release(id int) {
	p.ref[id]--
	if p.ref[id] > 0 {
		return
	}
	if p.cached[id] {
		p.pushTail(id)
		return
	}
	p.free = append(p.free, id)
}

// alloc takes a block and references it. When it had to evict a cached
// block, evicted reports that block's key. ok is false when nothing is
// available.
func (p *gpuPool) alloc() (id int, evicted uint64, hasEvicted, ok bool) {
	if n := len(p.free); n > 0 {
		id = p.free[n-1]
		p.free = p.free[:n-1]
		p.ref[id] = 1
		return id, 0, false, true
	}
	if p.head < 0 {
		return -1, 0, false, false
	}
	id = p.head
	p.unlink(id)
	evicted = p.key[id]
	delete(p.index, evicted)
	p.cached[id] = false
	p.ref[id] = 1
	return id, evicted, true, true
}

// register puts a referenced block in the prefix cache under key. It fails
// when another block already holds key; the caller keeps its block private.
func (p *gpuPool) register(id int, key uint64) bool {
	if _, dup := p.index[key]; dup {
		return false
	}
	p.index[key] = id
	p.key[id] = key
	p.cached[id] = true
	return true
}

// evict drops key from the prefix cache. A referenced block stays with its
// sequences, private, and is freed when they release it.
func (p *gpuPool) evict(key uint64) bool {
	id, ok := p.index[key]
	if !ok {
		return false
	}
	delete(p.index, key)
	p.cached[id] = false
	if p.ref[id] == 0 {
		p.unlink(id)
		p.free = append(p.free, id)
	}
	return true
}

// clear empties the prefix cache and returns the keys it held.
func (p *gpuPool) clear() []uint64 {
	keys := make([]uint64, 0, len(p.index))
	for k := range p.index {
		keys = append(keys, k)
	}
	for _, k := range keys {
		p.evict(k)
	}
	return keys
}

func (p *gpuPool) unlink(id int) {
	pv, nx := p.prev[id], p.next[id]
	if pv >= 0 {
		p.next[pv] = nx
	} else {
		p.head = nx
	}
	if nx >= 0 {
		p.prev[nx] = pv
	} else {
		p.tail = pv
	}
	p.prev[id], p.next[id] = -1, -1
	p.lruLen--
}

func (p *gpuPool) pushTail(id int) {
	p.prev[id], p.next[id] = p.tail, -1
	if p.tail >= 0 {
		p.next[p.tail] = id
	} else {
		p.head = id
	}
	p.tail = id
	p.lruLen++
}
