// Package index is the router's inventory: which source holds which KV block
// on which tier, for one model and block size.
//
// A block's identity is its rolling sequence hash (kvhash, docs/wire.md §4.1): it
// commits to the whole prefix, so a node needs no parent or child links and
// Match walks a request by hashing, never by pointer chasing. Sources keep
// their own engine hashes beside it, because removals name them and hints
// carry them.
//
// The index is pure core logic: no goroutines, no clock. Recency for
// eviction is a logical clock advanced by Match.
//
// Concurrency: the index is split into 16 shards by the top bits of the
// identity, each with its own RWMutex over its directory and the nodes it
// names. A writer holds one shard's lock at a time, for one block; Match
// read-locks every shard together, always in ascending order, so readers
// never deadlock with writers and never exclude each other: there is no
// global lock. (Match reads nodes where it predicts them, and a predicted
// slot may hold any shard's node.) Ops of one source apply in
// order under that source's mutex; ops of different sources proceed in
// parallel.
//
// Atomicity: an op is validated before it changes anything, so a rejected
// op leaves no trace; Apply stops at the first rejected op and reports its
// position (*OpError), the ops before it stay applied. A concurrent Match
// may observe a store half done, as a shorter prefix of it, never more.
package index

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"kvrouter/internal/kvhash"
)

// NumTiers is the number of tiers a block can reside on (kvevents.Tier).
const NumTiers = numTiers

// zeroSeq stands in for an identity that hashes to 0, which marks empty
// table slots.
const zeroSeq = 0x9e3779b97f4a7c15

// Config configures an Index.
type Config struct {
	// BlockSize is the number of tokens per block; every store's block
	// size must equal it.
	BlockSize int
	// MaxBlocks caps the indexed block identities; when an Apply leaves
	// more, the least recently matched blocks (and their descendants) are
	// evicted down to 15/16 of the cap. 0 means unbounded.
	MaxBlocks int
	// MaxBytes caps the index's memory the same way, as estimated from its
	// counts (EstimateBytes): a block costs more the more sources hold it,
	// so a memory bound cannot be a block count. 0 means unbounded.
	MaxBytes int64
}

// Index is the inventory of one (model, block size).
type Index struct {
	blockSize int
	maxBlocks int
	maxBytes  int64

	shards [numShards]shard
	nodes  store
	reg    registry
	conf   conflicts
	tokens tokens

	clock atomic.Uint64 // matches so far; recency epochs derive from it
	base  atomic.Uint64 // clock value of epoch 0, moved by rebase

	blocks atomic.Int64
	pairs  atomic.Int64

	evictMu sync.Mutex

	evicted        atomic.Uint64
	unknownParent  atomic.Uint64
	unknownRemove  atomic.Uint64
	remapped       atomic.Uint64
	conflictStores atomic.Uint64

	scratch sync.Pool
}

// New returns an empty index.
func New(cfg Config) (*Index, error) {
	if cfg.BlockSize <= 0 {
		return nil, fmt.Errorf("index: Config.BlockSize must be positive, got %d", cfg.BlockSize)
	}
	if cfg.MaxBlocks < 0 {
		return nil, fmt.Errorf("index: Config.MaxBlocks must not be negative, got %d", cfg.MaxBlocks)
	}
	if cfg.MaxBytes < 0 {
		return nil, fmt.Errorf("index: Config.MaxBytes must not be negative, got %d", cfg.MaxBytes)
	}
	ix := &Index{blockSize: cfg.BlockSize, maxBlocks: cfg.MaxBlocks, maxBytes: cfg.MaxBytes}
	for i := range ix.shards {
		ix.shards[i].nodes = &ix.nodes
	}
	ix.reg.init()
	ix.scratch.New = func() any { return new(scratch) }
	return ix, nil
}

// BlockSize returns the index's tokens per block.
func (ix *Index) BlockSize() int { return ix.blockSize }

// Len returns the number of indexed block identities.
func (ix *Index) Len() int { return int(ix.blocks.Load()) }

// Apply applies ops of one source in order. See the package comment for
// what is atomic.
func (ix *Index) Apply(src Source, ops ...Op) error {
	for {
		s, err := ix.reg.resolve(src)
		if err != nil {
			return err
		}
		s.mu.Lock()
		if s.gone { // removed between resolve and lock: intern anew
			s.mu.Unlock()
			continue
		}
		err = ix.applyLocked(s, ops)
		ix.flush(s)
		s.mu.Unlock()
		ix.maybeEvict()
		return err
	}
}

func (ix *Index) applyLocked(s *source, ops []Op) error {
	var conf []uint32
	for i := range ops {
		op := &ops[i]
		err := op.check(ix.blockSize)
		if err == nil {
			switch op.Kind {
			case OpStore:
				if op.SaltUnknown {
					s.saltUnknown.Store(true)
				}
				conf, err = ix.store(s, op, conf)
			case OpRemove:
				ix.remove(s, op.Hashes, 1<<op.Tier)
			case OpClear:
				tiers := uint32(1) << op.Tier
				if op.AllTiers {
					tiers = tierMask
				}
				ix.clear(s, tiers)
			}
		}
		if err != nil {
			return &OpError{Source: s.key, Pos: i, Kind: op.Kind, Err: err}
		}
	}
	return nil
}

// flush ends a batch of s's changes (an Apply, a removal): it publishes
// their counter changes and releases the set tokens' memo.
func (ix *Index) flush(s *source) {
	ix.forget(&s.memo)
	s.held.Add(s.dHeld)
	ix.pairs.Add(s.dHeld)
	ix.blocks.Add(s.dBlocks)
	s.dHeld, s.dBlocks = 0, 0
}

// store links op's blocks under their parent (or the root) for s.
//
// A conversation's turn stores a few blocks under a parent that is cold:
// its engine-map slot, directory line and node are three misses, which
// the blocks' own wait for (their identities hash from the parent's). So
// the blocks' engine-map slots are asked for with the parent's, and their
// directory lines with the parent's, in two rounds rather than five.
func (ix *Index) store(s *source, op *Op, conf []uint32) ([]uint32, error) {
	var prev uint64
	var depth, stamp uint32
	after := noRef // the ref new nodes should follow: the parent's, then each block's
	var parent *node
	var pseq uint64 // the parent's identity
	// A dump's blocks (Seqs) carry their own identities and depths: no
	// parent to look up.
	underParent := op.HasParent && op.Seqs == nil
	if underParent {
		ix.askEngine(s, op.Parent, op.Hashes)
		var ok bool
		if pseq, ok = s.engine.get(op.Parent); !ok {
			return conf, ix.unknownParentOf(op)
		}
		prev = pseq
	} else {
		// A root store is as recent as now; blocks under a parent inherit
		// its recency, so a block is never more recent than its ancestors
		// and eviction in recency order takes descendants first.
		stamp = ix.epoch()
		ix.askEngine(s, 0, op.Hashes)
	}
	seqs := s.seqs[:0]
	for i := range op.Hashes {
		var seq uint64
		switch {
		case op.Seqs != nil:
			seq = op.Seqs[i]
		case i == 0 && !op.HasParent:
			seq = op.Local[0]
		default:
			seq = kvhash.SequenceHash(prev, op.Local[i])
		}
		prev = seq
		seqs = append(seqs, ident(seq))
	}
	s.seqs = seqs
	if underParent {
		ix.askDirs(pseq, seqs)
		sh := &ix.shards[shardOf(pseq)]
		sh.mu.RLock()
		pos, _, ok := sh.holds(pseq, s.id, op.Parent)
		if ok {
			n := sh.at(pos)
			depth, stamp = n.depth()+1, n.loadStamp()
			after, parent = sh.dir[pos].ref, n
		}
		sh.mu.RUnlock()
		if !ok {
			return conf, ix.unknownParentOf(op)
		}
		if int64(depth)+int64(len(op.Hashes)) > maxDepth {
			return conf, fmt.Errorf("%w: chain deeper than %d blocks", ErrInvalidOp, maxDepth)
		}
	} else if len(seqs) > 1 {
		ix.askDirs(0, seqs)
	}
	bit := uint32(1) << op.Tier
	prevNode := parent           // the node at after, nil if none
	pfFrom, pfTo := noRef, noRef // refs whose node lines were asked for
	for i, e := range op.Hashes {
		// The chain's next nodes, existing or new, most likely follow the
		// previous one in its run: ask for their lines at once, not one by
		// one under each block's lock.
		if prevNode != nil && after%runLen != runLen-1 && (after < pfFrom || after >= pfTo) {
			pfFrom, pfTo = after+1, min(after+uint32(len(op.Hashes)-i), after|(runLen-1))
			prefetchRun(prevNode, pfTo-after)
		}
		d := depth + uint32(i)
		if op.Seqs != nil {
			d = op.Depths[i]
		}
		conf, after, prevNode = ix.hold(s, seqs[i], d, stamp, after, bit, e, conf)
	}
	return conf, nil
}

// prefetchRun asks for the lines of the k nodes after n in its run.
func prefetchRun(n *node, k uint32) {
	var buf [runLen / 2]uintptr
	m := 0
	last := uintptr(unsafe.Pointer(n)) &^ 63
	for a := uintptr(unsafe.Pointer(n)); k > 0; k-- {
		a += unsafe.Sizeof(node{})
		if l := a &^ 63; l != last {
			buf[m] = l
			m++
			last = l
		}
	}
	if m > 0 {
		prefetch(buf[:m])
	}
}

// unknownParentOf counts and returns the error of a store whose parent
// its source does not hold.
func (ix *Index) unknownParentOf(op *Op) error {
	ix.unknownParent.Add(1)
	return fmt.Errorf("%w: parent_block_hash %#x", ErrUnknownParent, op.Parent)
}

// askEngine asks for the engine-map slots of the parent (0: none) and
// hashes of a store, all at once, so that their misses overlap rather than
// come one block at a time.
func (ix *Index) askEngine(s *source, parent uint64, hashes []uint64) {
	var a addrBuf
	if parent != 0 {
		a.add(s.engine.addr(parent))
	}
	for _, e := range hashes {
		a.add(s.engine.addr(e))
	}
	a.flush()
}

// askDirs asks for the directory lines of the parent (0: none) and blocks
// of a store. It takes no shard lock: it loads nothing from the tables.
func (ix *Index) askDirs(parent uint64, seqs []uint64) {
	var a addrBuf
	if parent != 0 {
		if t := ix.shards[shardOf(parent)].pf.Load(); t != nil {
			a.add(t.addr(parent))
		}
	}
	for _, seq := range seqs {
		if t := ix.shards[shardOf(seq)].pf.Load(); t != nil {
			a.add(t.addr(seq))
		}
	}
	a.flush()
}

// addrBuf gathers addresses to prefetch, on the stack: a buffer per source
// would cost a thousand sources a megabyte or two.
type addrBuf struct {
	buf [64]uintptr
	n   int
}

// add adds p, unless 0 (an empty table's).
func (a *addrBuf) add(p uintptr) {
	if p == 0 {
		return
	}
	if a.n == len(a.buf) {
		a.flush()
	}
	a.buf[a.n] = p
	a.n++
}

func (a *addrBuf) flush() {
	if a.n > 0 {
		prefetch(a.buf[:a.n])
		a.n = 0
	}
}

// hold records that s holds identity seq on the tier bit under engine hash
// e, and returns the node's ref; a new node goes right after ref after if
// it can.
func (ix *Index) hold(s *source, seq uint64, depth, stamp, after, bit uint32, e uint64, conf []uint32) ([]uint32, uint32, *node) {
	sh := &ix.shards[shardOf(seq)]
	sh.mu.Lock()
	pos, ok := sh.find(seq)
	if !ok {
		pos = sh.newNode(seq, e, depth, stamp, after)
		s.dBlocks++
	}
	ref := sh.dir[pos].ref
	n := sh.at(pos)
	b := beforeOf(sh, n)
	w, found := sh.getHolder(n, s.id)
	var prevE uint64
	rehashed := false
	conf = conf[:0]
	word := w | bit // s's word as stored after the change
	switch {
	case found && sh.engineOf(n, w) == e:
		if word != w {
			sh.putHolder(n, word)
		}
	case found:
		prevE, rehashed = sh.engineOf(n, w), true
		word = sh.setEngine(n, word, e)
		conf = sh.disagree(conf, n, s.id, e)
	default:
		word = sh.setEngine(n, s.id<<idShift|bit, e)
		conf = sh.disagree(conf, n, s.id, e)
		s.dHeld++
	}
	if word != w && tokened(sh, n, b) {
		ix.settle(sh, n, b, word, &s.memo)
	}
	sh.mu.Unlock()

	if len(conf) > 0 {
		ix.conflictStores.Add(1)
		for _, id := range conf {
			ix.conf.add(s.id, id)
		}
	}
	if rehashed {
		if old, _ := s.engine.get(prevE); old == seq {
			s.engine.del(prevE)
		}
	}
	if old, had := s.engine.swap(e, seq); had && old != seq {
		// The source reused an engine hash for another identity: the last
		// store wins, and the old block cannot be named by it anymore.
		if _, held := ix.unhold(s, old, e, tierMask); held {
			ix.remapped.Add(1)
		}
	}
	return conf, ref, n
}

// unhold clears tiers of s's holding of seq if s holds it under e.
func (ix *Index) unhold(s *source, seq uint64, e uint64, tiers uint32) (gone, held bool) {
	sh := &ix.shards[shardOf(seq)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	pos, w, held := sh.holds(seq, s.id, e)
	if !held {
		return false, false
	}
	n := sh.at(pos)
	b := beforeOf(sh, n)
	gone, nodeGone := sh.unhold(pos, w, tiers)
	switch {
	case nodeGone:
		ix.unrefToken(b.tok)
	case !tokened(sh, n, b):
		// inline or dense before and after: no token to move
	case gone:
		ix.settle(sh, n, b, w>>idShift<<idShift, &s.memo)
	case w&tiers&tierMask != 0:
		ix.settle(sh, n, b, w&^tiers, &s.memo)
	}
	if gone {
		s.dHeld--
	}
	if nodeGone {
		s.dBlocks--
	}
	return gone, true
}

func (ix *Index) remove(s *source, hashes []uint64, tiers uint32) {
	for _, e := range hashes {
		seq, ok := s.engine.get(e)
		if !ok {
			ix.unknownRemove.Add(1)
			continue
		}
		gone, held := ix.unhold(s, seq, e, tiers)
		if !held {
			ix.unknownRemove.Add(1) // stale: evicted by the index
		}
		if gone || !held {
			s.engine.del(e)
		}
	}
	if s.engine.len() == 0 {
		s.saltUnknown.Store(false) // nothing of unknown salt is left
	}
}

func (ix *Index) clear(s *source, tiers uint32) {
	s.scratch = s.engine.entries(s.scratch[:0])
	s.memo.wide = true // in the engine table's order, not the chains'
	for _, es := range s.scratch {
		if gone, held := ix.unhold(s, es.seq, es.e, tiers); gone || !held {
			s.engine.del(es.e)
		}
	}
	if s.engine.len() == 0 {
		s.engine.reset()
		s.saltUnknown.Store(false)
	}
	s.scratch = nil
}

// RemoveSource drops everything src holds and forgets it (a worker left).
func (ix *Index) RemoveSource(src Source) {
	s := ix.reg.lookup(src)
	if s == nil {
		return
	}
	s.mu.Lock()
	if s.gone {
		s.mu.Unlock()
		return
	}
	ix.clear(s, tierMask)
	ix.flush(s)
	s.gone = true
	s.mu.Unlock()
	ix.conf.forget(s.id)
	ix.reg.drop(s)
}

// SaltKnown reports whether every block src holds was stored with its
// cache salt known; a source that never stored anything is.
func (ix *Index) SaltKnown(src Source) bool {
	s := ix.reg.lookup(src)
	return s == nil || !s.saltUnknown.Load()
}

// Conflict reports whether a and b were seen reporting different engine
// hashes for the same block: their hash seeds differ, so a hint must never
// ask one to pull the other's blocks.
func (ix *Index) Conflict(a, b Source) bool {
	sa, sb := ix.reg.lookup(a), ix.reg.lookup(b)
	if sa == nil || sb == nil || sa == sb {
		return false
	}
	return ix.conf.has(sa.id, sb.id)
}

// Sources returns the sources that hold anything, in no particular order.
func (ix *Index) Sources() []Source {
	var out []Source
	for _, s := range ix.reg.ids() {
		if s != nil && s.held.Load() > 0 {
			out = append(out, s.key)
		}
	}
	return out
}

// Stats is a snapshot of the index's size and counters.
type Stats struct {
	Blocks  int   // indexed block identities
	Pairs   int   // (block, source) residencies
	Sources int   // interned sources
	Bytes   int64 // estimated memory in use
	// Mapped is the part of Bytes in tables mapped outside the Go heap,
	// which runtime.MemStats does not see: directories whole, and the node
	// store's huge pages below its allocator's bump (the rest of its last
	// chunk is reserved, not backed).
	Mapped int64
	// Evicted counts blocks dropped to stay under Config.MaxBlocks and
	// Config.MaxBytes.
	Evicted uint64
	// UnknownParent counts stores rejected because their source did not
	// hold the parent: each is a gap to resync.
	UnknownParent uint64
	// UnknownRemove counts removals naming a hash the source did not hold.
	UnknownRemove uint64
	// Remapped counts stores that reused a source's engine hash for another
	// identity, dropping the old block.
	Remapped uint64
	// ConflictPairs is the number of source pairs seen disagreeing on a
	// block's engine hash; ConflictStores counts the block stores that did.
	ConflictPairs  int
	ConflictStores uint64
}

// perEngineEntry estimates an engineTable entry: a 16-byte slot at the
// table's average load.
const perEngineEntry = 28

// Stats returns a snapshot; Bytes is an estimate (the benchmark measures
// the heap).
func (ix *Index) Stats() Stats {
	st := Stats{
		Blocks:         int(ix.blocks.Load()),
		Pairs:          int(ix.pairs.Load()),
		Sources:        ix.reg.count(),
		Evicted:        ix.evicted.Load(),
		UnknownParent:  ix.unknownParent.Load(),
		UnknownRemove:  ix.unknownRemove.Load(),
		Remapped:       ix.remapped.Load(),
		ConflictPairs:  ix.conf.len(),
		ConflictStores: ix.conflictStores.Load(),
	}
	for i := range ix.shards {
		sh := &ix.shards[i]
		sh.mu.RLock()
		st.Bytes += sh.bytes()
		st.Mapped += sh.mapped()
		sh.mu.RUnlock()
	}
	nodes, mapped := ix.nodes.bytes()
	st.Bytes += nodes + int64(st.Pairs)*perEngineEntry + ix.tokens.bytes()
	st.Mapped += mapped
	return st
}
