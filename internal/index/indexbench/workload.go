// Package indexbench generates a realistic inventory workload and measures
// the index on it: apply throughput, match latency and memory per
// (block, source) pair. It backs `kvrouter bench index` and the Go
// benchmarks of package index.
package indexbench

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"kvrouter/internal/index"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvhash"
)

// Config shapes the workload.
type Config struct {
	Sources      int    // worker ranks
	Blocks       int    // distinct blocks to aim for
	PromptBlocks int    // longest prompt, in blocks
	Seed         uint64 // the workload is a pure function of Config
}

// The sharing pattern. Sources form groups (a deployment serving a few
// apps); each group has its own system prompts; a conversation lives in one
// group, grows turn by turn up to PromptBlocks and is served mostly by its
// home source, sometimes by another of its group (which then stores the
// whole prefix it lacked). Besides, a few hot prompts (a shared document)
// are cached everywhere, each source holding a prefix of its own length as
// its LRU trimmed the tail.
const (
	groupSize     = 16
	sysPerGroup   = 4
	sysBlocks     = 16
	hotPrompts    = 2
	minTurnBlocks = 2
	maxTurnBlocks = 12
	awayPercent   = 10 // turns served by another source of the group
)

// Workload is a generated op stream and the prompts to match.
type Workload struct {
	Config  Config
	Sources []index.Source
	// ops hold no pointers: a GC cycle while the index is built does not
	// scan a million-block workload's op stream (~50 MB as index.Ops with
	// their slices), which a router, decoding events as they come, never
	// holds. Drop them (Drop) once applied.
	ops     []wop
	engines [][]uint64 // by path: engine hashes of Hot's, then Convs'
	// BlockEvents counts the blocks the ops store.
	BlockEvents int
	// Convs are conversation prompts (local hashes): at most groupSize
	// sources share any prefix of them.
	Convs [][]uint64
	// Hot are the prompts every source holds a prefix of.
	Hot [][]uint64
}

// wop is an op of the workload: source src stores blocks [lo, hi) of path
// (Hot's, then Convs'), under block lo-1 when lo > 0.
type wop struct {
	src, path, lo, hi int32
}

// op returns o as the index applies it.
func (w *Workload) op(o wop) index.Op {
	local := w.pathOf(int(o.path))
	engines := w.engines[o.path]
	op := index.Op{Kind: index.OpStore, Tier: kvevents.TierDevice, Local: local[o.lo:o.hi], Hashes: engines[o.lo:o.hi]}
	if o.lo > 0 {
		op.Parent, op.HasParent = engines[o.lo-1], true
	}
	return op
}

func (w *Workload) pathOf(p int) []uint64 {
	if p < len(w.Hot) {
		return w.Hot[p]
	}
	return w.Convs[p-len(w.Hot)]
}

// Drop releases the op stream, once applied: matches then run against a
// heap like a router's.
func (w *Workload) Drop() { w.ops = nil }

func (c Config) check() error {
	switch {
	case c.Sources < 1:
		return fmt.Errorf("indexbench: sources must be at least 1, got %d", c.Sources)
	case c.PromptBlocks < sysBlocks+maxTurnBlocks:
		return fmt.Errorf("indexbench: prompt blocks must be at least %d, got %d", sysBlocks+maxTurnBlocks, c.PromptBlocks)
	case c.Blocks < c.PromptBlocks:
		return fmt.Errorf("indexbench: blocks must be at least the prompt blocks (%d), got %d", c.PromptBlocks, c.Blocks)
	}
	return nil
}

// engineHash stands in for an engine's block hash: a bijection of the
// identity, the same on every source (one hash seed fleet-wide).
func engineHash(seq uint64) uint64 { return seq ^ 0x5bd1e9955bd1e995 }

type conv struct {
	id         int // in Convs
	group, sys int
	home       int
	path       []uint64 // local hashes, system prompt first
	seqs       []uint64
	engines    []uint64
	held       map[int]int // source → blocks of path it holds
}

func (c *conv) grow(local uint64) {
	seq := local
	if n := len(c.seqs); n > 0 {
		seq = kvhash.SequenceHash(c.seqs[n-1], local)
	}
	c.path = append(c.path, local)
	c.seqs = append(c.seqs, seq)
	c.engines = append(c.engines, engineHash(seq))
}

// Generate builds the workload for cfg.
func Generate(cfg Config) (*Workload, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x6a09e667f3bcc908))
	w := &Workload{Config: cfg}
	for i := range cfg.Sources {
		w.Sources = append(w.Sources, index.WorkerRank(fmt.Sprintf("worker-%04d", i), 0))
	}
	groups := (cfg.Sources + groupSize - 1) / groupSize
	groupOf := func(g int) (lo, hi int) { return g * groupSize, min((g+1)*groupSize, cfg.Sources) }

	// Hot prompts: every source stores a prefix of each.
	for h := range hotPrompts {
		var c conv
		for range cfg.PromptBlocks {
			c.grow(r.Uint64())
		}
		w.Hot = append(w.Hot, c.path)
		w.engines = append(w.engines, c.engines)
		for s := range w.Sources {
			n := cfg.PromptBlocks/2 + r.IntN(cfg.PromptBlocks/2+1)
			w.add(wop{src: int32(s), path: int32(h), lo: 0, hi: int32(n)})
		}
	}

	// System prompts per group, as conversation stems.
	sys := make([][]conv, groups)
	for g := range sys {
		for range sysPerGroup {
			var c conv
			for range sysBlocks {
				c.grow(r.Uint64())
			}
			sys[g] = append(sys[g], c)
		}
	}
	sysHeld := make(map[[3]int]bool) // (source, group, sys)

	convBlocks := cfg.Blocks - hotPrompts*cfg.PromptBlocks - groups*sysPerGroup*sysBlocks
	nconv := max(1, convBlocks/(cfg.PromptBlocks-sysBlocks))
	convs := make([]*conv, nconv)
	for i := range convs {
		g := r.IntN(groups)
		lo, hi := groupOf(g)
		k := r.IntN(sysPerGroup)
		stem := sys[g][k]
		c := &conv{id: i, group: g, sys: k, home: lo + r.IntN(hi-lo), held: make(map[int]int)}
		c.path = append([]uint64(nil), stem.path...)
		c.seqs = append([]uint64(nil), stem.seqs...)
		c.engines = append([]uint64(nil), stem.engines...)
		convs[i] = c
	}

	// Turns, round-robin across live conversations so that sources
	// interleave as they would in time.
	live := slices.Clone(convs) // filtered in place below; convs stays whole
	for len(live) > 0 {
		next := live[:0]
		for _, c := range live {
			path := int32(hotPrompts + c.id)
			grow := minTurnBlocks + r.IntN(maxTurnBlocks-minTurnBlocks+1)
			for range min(grow, cfg.PromptBlocks-len(c.path)) {
				c.grow(r.Uint64())
			}
			s := c.home
			if r.IntN(100) < awayPercent {
				lo, hi := groupOf(c.group)
				s = lo + r.IntN(hi-lo)
			}
			h := c.held[s]
			key := [3]int{s, c.group, c.sys}
			if h == 0 && sysHeld[key] {
				h = sysBlocks
			}
			w.add(wop{src: int32(s), path: path, lo: int32(h), hi: int32(len(c.path))})
			c.held[s] = len(c.path)
			sysHeld[key] = true
			if len(c.path) < cfg.PromptBlocks {
				next = append(next, c)
			}
		}
		live = next
	}
	for _, c := range convs {
		w.Convs = append(w.Convs, c.path)
		w.engines = append(w.engines, c.engines)
	}
	return w, nil
}

func (w *Workload) add(o wop) {
	if o.hi == o.lo {
		return
	}
	w.ops = append(w.ops, o)
	w.BlockEvents += int(o.hi - o.lo)
}

// Build applies the whole workload to a fresh index.
func (w *Workload) Build(maxBlocks int) (*index.Index, error) {
	ix, err := index.New(index.Config{BlockSize: 16, MaxBlocks: maxBlocks})
	if err != nil {
		return nil, err
	}
	if err := w.Apply(ix); err != nil {
		return nil, err
	}
	return ix, nil
}

// Apply applies the workload's ops in order on one goroutine.
func (w *Workload) Apply(ix *index.Index) error {
	for i, o := range w.ops {
		if err := ix.Apply(w.Sources[o.src], w.op(o)); err != nil {
			return fmt.Errorf("indexbench: op %d: %w", i, err)
		}
	}
	return nil
}
