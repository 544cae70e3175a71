// This file holds the scheduler core: continuous batching, chunked prefill, cache stores.

package mocker

import (
	"errors"
	"fmt"
	"time"

	"kvrouter/internal/kvevents"
)

// ErrTooLarge: a request needs more GPU blocks than the rank has, so it
// could never be scheduled.
var ErrTooLarge = errors.New("request needs more KV blocks than the GPU pool holds")

// Lower is the tier below the GPU pool: the DP rank's KV cache runner, all
// of its TP shards together. The scheduler writes every block it computes
// through to it and restores GPU misses it holds.
type Lower interface {
	// Holds reports whether every shard holds key.
	Holds(key uint64) bool
	// Load copies key's block into dst; false if a shard lacks it.
	Load(key uint64, dst []byte) bool
	// Store deposits a computed block.
	Store(key uint64, block []byte)
}

// schedConfig is what the scheduler core needs from Config.
type schedConfig struct {
	BlockSize        int
	MaxNumSeqs       int
	MaxBatchedTokens int
	PrefillPerToken  time.Duration
	DecodePerToken   time.Duration
	RestorePerToken  time.Duration
	ModelSeed        uint64
	// NoPrefixCache keeps computed blocks private to their sequence (SGLang
	// decode servers run without a radix cache by default): nothing is
	// found, cached or reported on the GPU, though the lower tier still
	// gets every computed block.
	NoPrefixCache bool
}

type seqState uint8

const (
	seqWaiting seqState = iota
	seqPrefill
	seqDecode
	seqDone
)

// Seq is one request inside the scheduler.
type Seq struct {
	ID        string
	Tokens    []uint32
	Keys      []uint64 // engine hash of each full prompt block
	Seeds     []uint64 // content seed of each full prompt block (contentSeeds)
	Salt      string
	LoRA      string // the LoRA adapter, "" for the base model
	MaxTokens int
	// PeerKeys are blocks this request pulled from a peer into the local
	// runner: restoring one of them counts as peer-restored.
	PeerKeys map[uint64]bool
	// Export: a prefill leg, whose every full block must be in the lower
	// tier when its prefill ends, for a decode engine to pull.
	Export bool

	// Set by the scheduler.
	Output       []uint32 // every output token, fixed when prefill ends
	Emitted      int
	GPUTokens    int // prompt tokens found in the GPU prefix cache
	RunnerTokens int // ... restored from the local runner
	PeerTokens   int // ... restored from blocks pulled from a peer

	blocks   []int
	computed int
	state    seqState
}

// Emit is one output token of a step.
type Emit struct {
	Seq   *Seq
	Token uint32
	Done  bool
}

// StepResult is what one engine step did. Its effects on the caches are
// already applied; Emits become visible to clients after Duration.
type StepResult struct {
	Duration       time.Duration
	PrefillTokens  int
	RestoredTokens int
	DecodeTokens   int
	Emits          []Emit
	Admitted       []*Seq
	Events         []kvevents.Event // GPU-tier events, in order
}

// Idle reports that the step did nothing.
func (r *StepResult) Idle() bool {
	return r.PrefillTokens == 0 && r.DecodeTokens == 0 && r.RestoredTokens == 0 && len(r.Emits) == 0
}

// schedStats are the scheduler's gauges and counters.
type schedStats struct {
	Running, Waiting                 int
	GPUUsed, GPUCached, GPUTotal     int
	PrefillTokens                    uint64
	GPUTokens, RunnerTokens, PeerTok uint64
}

// scheduler is one DP rank's engine core: continuous batching with chunked
// prefill over a GPU block pool with prefix caching. It is not safe for
// concurrent use and has no clock: Step says how long the step takes.
type scheduler struct {
	cfg     schedConfig
	pool    *gpuPool
	lower   Lower
	vocab   *vocab
	waiting []*Seq
	running []*Seq
	stats   schedStats
	events  []kvevents.Event
}

func newScheduler(cfg schedConfig, gpuBlocks, blockBytes int, lower Lower, v *vocab) *scheduler {
	return &scheduler{cfg: cfg, pool: newGPUPool(gpuBlocks, blockBytes), lower: lower, vocab: v}
}

func blocksFor(tokens, blockSize int) int { return (tokens + blockSize - 1) / blockSize }

// cacheable is how many of seq's full blocks may come from a cache: the
// last prompt token is always computed, as the engines need its logits.
func (s *scheduler) cacheable(seq *Seq) int {
	return min(len(seq.Keys), (len(seq.Tokens)-1)/s.cfg.BlockSize)
}

// Add queues seq.
func (s *scheduler) Add(seq *Seq) error {
	if len(seq.Tokens) == 0 || seq.MaxTokens < 1 {
		return fmt.Errorf("mocker: request %s: empty prompt or max_tokens below 1", seq.ID)
	}
	if need := blocksFor(len(seq.Tokens)+seq.MaxTokens, s.cfg.BlockSize); need > s.pool.total() {
		return fmt.Errorf("%w: %d blocks for %d prompt + %d output tokens, %d in the pool (--gpu-blocks)",
			ErrTooLarge, need, len(seq.Tokens), seq.MaxTokens, s.pool.total())
	}
	seq.state = seqWaiting
	s.waiting = append(s.waiting, seq)
	return nil
}

// Abort drops seq wherever it is and frees its blocks.
func (s *scheduler) Abort(seq *Seq) bool {
	for i, w := range s.waiting {
		if w == seq {
			s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
			seq.state = seqDone
			return true
		}
	}
	for i, r := range s.running {
		if r == seq {
			s.running = append(s.running[:i], s.running[i+1:]...)
			s.free(seq)
			return true
		}
	}
	return false
}

// LocalPrefix reports how many of keys' leading blocks (at most limit) the
// GPU cache holds, and how many more after them the lower tier holds.
func (s *scheduler) LocalPrefix(keys []uint64, limit int) (gpu, lower int) {
	limit = min(limit, len(keys))
	for gpu < limit {
		if _, ok := s.pool.lookup(keys[gpu]); !ok {
			break
		}
		gpu++
	}
	for s.lower != nil && gpu+lower < limit && s.lower.Holds(keys[gpu+lower]) {
		lower++
	}
	return gpu, lower
}

// Step runs one engine step: a decode token for each sequence past
// prefill, then prefill chunks in arrival order, admitting waiting
// sequences while the token budget and max-num-seqs allow.
func (s *scheduler) Step() StepResult {
	var res StepResult
	budget := s.cfg.MaxBatchedTokens
	for _, seq := range s.running {
		if seq.state != seqDecode || budget == 0 {
			continue
		}
		budget--
		res.DecodeTokens++
		s.emit(seq, &res)
	}
	for _, seq := range s.running {
		if seq.state == seqPrefill && budget > 0 {
			budget -= s.prefill(seq, budget, &res)
		}
	}
	for len(s.waiting) > 0 && budget > 0 && len(s.running) < s.cfg.MaxNumSeqs {
		seq := s.waiting[0]
		if !s.admit(seq, &res) {
			break // FCFS: a head that does not fit blocks the queue
		}
		s.waiting = s.waiting[1:]
		s.running = append(s.running, seq)
		res.Admitted = append(res.Admitted, seq)
		budget -= s.prefill(seq, budget, &res)
	}
	live := s.running[:0]
	for _, seq := range s.running {
		if seq.state != seqDone {
			live = append(live, seq)
		}
	}
	clear(s.running[len(live):])
	s.running = live
	if !res.Idle() {
		res.Duration = s.cfg.DecodePerToken +
			time.Duration(res.PrefillTokens)*s.cfg.PrefillPerToken +
			time.Duration(res.RestoredTokens)*s.cfg.RestorePerToken
	}
	res.Events, s.events = s.events, nil
	return res
}

// admit gives seq its blocks: cached prefix, blocks restored from the lower
// tier, and fresh blocks for the rest of the prompt and the output.
func (s *scheduler) admit(seq *Seq, res *StepResult) bool {
	bs := s.cfg.BlockSize
	limit := s.cacheable(seq)
	need := blocksFor(len(seq.Tokens)+seq.MaxTokens, bs)
	hits := 0
	for hits < limit {
		id, ok := s.pool.lookup(seq.Keys[hits])
		if !ok {
			break
		}
		s.pool.acquire(id)
		seq.blocks = append(seq.blocks, id)
		hits++
	}
	if s.pool.available() < need-hits {
		for _, id := range seq.blocks {
			s.pool.release(id)
		}
		seq.blocks = seq.blocks[:0]
		return false
	}
	for len(seq.blocks) < need {
		id, evicted, hasEvicted, _ := s.pool.alloc()
		if hasEvicted {
			s.removed(evicted)
		}
		seq.blocks = append(seq.blocks, id)
	}
	restored := hits
	run := newRun(seq, hits)
	for s.lower != nil && restored < limit {
		id, key := seq.blocks[restored], seq.Keys[restored]
		if !s.lower.Load(key, s.pool.bytes(id)) {
			break
		}
		if seq.PeerKeys[key] {
			seq.PeerTokens += bs
		} else {
			seq.RunnerTokens += bs
		}
		s.cache(&run, restored, false)
		restored++
	}
	s.flush(&run)
	seq.GPUTokens = hits * bs
	seq.computed = restored * bs
	seq.state = seqPrefill
	res.RestoredTokens += (restored - hits) * bs
	s.stats.GPUTokens += uint64(seq.GPUTokens)
	s.stats.RunnerTokens += uint64(seq.RunnerTokens)
	s.stats.PeerTok += uint64(seq.PeerTokens)
	return true
}

// prefill computes up to budget prompt tokens of seq and returns how many.
func (s *scheduler) prefill(seq *Seq, budget int, res *StepResult) int {
	bs := s.cfg.BlockSize
	start := seq.computed
	n := min(budget, len(seq.Tokens)-start)
	seq.computed += n
	res.PrefillTokens += n
	s.stats.PrefillTokens += uint64(n)
	run := newRun(seq, start/bs)
	for b := start / bs; b < len(seq.Keys) && (b+1)*bs <= seq.computed; b++ {
		fillBlock(s.pool.bytes(seq.blocks[b]), s.cfg.ModelSeed, seq.Seeds[b])
		s.cache(&run, b, true)
	}
	s.flush(&run)
	if seq.computed == len(seq.Tokens) {
		if seq.Export && s.lower != nil {
			// Blocks found in the GPU cache may have left the lower tier
			// since they were computed: the decode engine pulls from it.
			for b, k := range seq.Keys {
				if !s.lower.Holds(k) {
					s.lower.Store(k, s.pool.bytes(seq.blocks[b]))
				}
			}
		}
		d := newDigest()
		for b := range seq.Keys {
			d.block(s.pool.bytes(seq.blocks[b]))
		}
		d.tail(seq.Tokens[len(seq.Keys)*bs:])
		seq.Output = s.vocab.generate(d.sum(), seq.MaxTokens)
		seq.state = seqDecode
		s.emit(seq, res)
	}
	return n
}

func (s *scheduler) emit(seq *Seq, res *StepResult) {
	tok := seq.Output[seq.Emitted]
	seq.Emitted++
	done := seq.Emitted == seq.MaxTokens
	res.Emits = append(res.Emits, Emit{Seq: seq, Token: tok, Done: done})
	if done {
		s.free(seq)
	}
}

func (s *scheduler) free(seq *Seq) {
	for _, id := range seq.blocks {
		s.pool.release(id)
	}
	seq.blocks = nil
	seq.state = seqDone
}

// storeRun collects consecutive blocks of one sequence cached in a step,
// which the engines report as one coalesced BlockStored event.
type storeRun struct {
	seq        *Seq
	start, end int
}

func newRun(seq *Seq, at int) storeRun { return storeRun{seq: seq, start: at, end: at} }

// cache puts block b of run's sequence in the prefix cache, writing it
// through to the lower tier when it was computed rather than restored.
func (s *scheduler) cache(run *storeRun, b int, computed bool) {
	seq := run.seq
	id, key := seq.blocks[b], seq.Keys[b]
	if s.cfg.NoPrefixCache {
		if computed && s.lower != nil {
			s.lower.Store(key, s.pool.bytes(id))
		}
		run.start, run.end = b+1, b+1
		return
	}
	if !s.pool.register(id, key) {
		// Another sequence cached the same block meanwhile: this copy stays
		// private and breaks the run.
		s.flush(run)
		run.start, run.end = b+1, b+1
		return
	}
	if run.end != b {
		s.flush(run)
		run.start = b
	}
	run.end = b + 1
	if computed && s.lower != nil {
		s.lower.Store(key, s.pool.bytes(id))
	}
}

func (s *scheduler) flush(run *storeRun) {
	if run.end <= run.start {
		return
	}
	seq, bs := run.seq, s.cfg.BlockSize
	ev := kvevents.Event{
		Kind:        kvevents.KindStored,
		BlockHashes: append([]uint64(nil), seq.Keys[run.start:run.end]...),
		TokenIDs:    append([]uint32(nil), seq.Tokens[run.start*bs:run.end*bs]...),
		BlockSize:   bs,
		CacheSalt:   seq.Salt,
		LoRAName:    seq.LoRA,
		Tier:        kvevents.TierDevice,
	}
	if run.start > 0 {
		ev.ParentHash, ev.HasParent = seq.Keys[run.start-1], true
	}
	s.events = append(s.events, ev)
	run.start = run.end
}

// removed reports key's removal from the GPU cache, coalesced with an
// immediately preceding removal.
func (s *scheduler) removed(key uint64) {
	if n := len(s.events); n > 0 && s.events[n-1].Kind == kvevents.KindRemoved {
		s.events[n-1].BlockHashes = append(s.events[n-1].BlockHashes, key)
		return
	}
	s.events = append(s.events, kvevents.Event{Kind: kvevents.KindRemoved, BlockHashes: []uint64{key}, Tier: kvevents.TierDevice})
}

// Evict drops keys from the GPU cache (all of it when keys is nil) and
// returns how many it dropped with the events to publish.
func (s *scheduler) Evict(keys []uint64) (int, []kvevents.Event) {
	n := 0
	if keys == nil {
		for _, k := range s.pool.clear() {
			s.removed(k)
			n++
		}
	} else {
		for _, k := range keys {
			if s.pool.evict(k) {
				s.removed(k)
				n++
			}
		}
	}
	evs := s.events
	s.events = nil
	return n, evs
}

// Reset empties the GPU cache: one AllBlocksCleared. Running sequences keep
// their blocks, now private.
func (s *scheduler) Reset() (int, []kvevents.Event) {
	n := len(s.pool.clear())
	return n, []kvevents.Event{{Kind: kvevents.KindCleared}}
}

// Stats returns the scheduler's gauges and counters.
func (s *scheduler) Stats() schedStats {
	st := s.stats
	st.Running, st.Waiting = len(s.running), len(s.waiting)
	st.GPUUsed, st.GPUCached, st.GPUTotal = s.pool.used(), s.pool.cachedCount(), s.pool.total()
	return st
}

// Busy reports whether any sequence is queued or running.
func (s *scheduler) Busy() bool { return len(s.running) > 0 || len(s.waiting) > 0 }
