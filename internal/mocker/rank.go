// This file holds one DP rank's service: the scheduler's driver, its events and its runner sinks.

package mocker

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"kvrouter/internal/kvencode"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvstream"
	"kvrouter/internal/runner"
)

// rank is one DP rank's service: it owns the scheduler core, drives it
// with a loop that waits each step's simulated duration on the clock, and
// publishes the rank's KV events.
type rank struct {
	id    int
	cfg   *Config
	log   *slog.Logger
	tier  *shards
	cat   *catalog
	pub   *kvstream.Publisher
	enc   kvencode.Encoder
	topic string // the live topic: with snapshots it names the epoch
	epoch string // SGLang's publisher epoch, with snapshots

	// load counts the rank's requests from arrival (before any pull) to
	// their end, for least-loaded placement.
	load atomic.Int64

	// shardsMu orders the vLLM flavour's folded runner inventory (TP > 1,
	// see sink).
	shardsMu sync.Mutex

	mu      sync.Mutex
	sched   *scheduler
	jobs    map[*Seq]*job
	changed chan struct{} // closed and replaced whenever the rank goes idle
	wake    chan struct{}
}

func newRank(id int, cfg *Config, v *vocab) *rank {
	r := &rank{
		id:      id,
		cfg:     cfg,
		log:     cfg.Logger.With("dp_rank", id),
		cat:     newCatalog(),
		enc:     kvencode.Encoder{Format: cfg.format(), Envelope: kvencode.EnvelopeArray},
		jobs:    make(map[*Seq]*job),
		changed: make(chan struct{}),
		wake:    make(chan struct{}, 1),
	}
	r.tier = &shards{shardBytes: cfg.blockBytes() / cfg.TP}
	sc := schedConfig{
		BlockSize: cfg.BlockSize, MaxNumSeqs: cfg.MaxNumSeqs, MaxBatchedTokens: cfg.MaxBatchedTokens,
		PrefillPerToken: cfg.PrefillPerToken, DecodePerToken: cfg.DecodePerToken, RestorePerToken: cfg.RestorePerToken,
		ModelSeed: cfg.ModelSeed, NoPrefixCache: cfg.Flavor == SGLang && cfg.Role == RoleDecode,
	}
	r.sched = newScheduler(sc, cfg.GPUBlocks, cfg.blockBytes(), r.tier, v)
	return r
}

// run drives the scheduler until ctx is done.
func (r *rank) run(ctx context.Context) {
	for {
		start := r.cfg.Clock.Now()
		r.mu.Lock()
		res := r.sched.Step()
		for _, seq := range res.Admitted {
			if j := r.jobs[seq]; j != nil {
				// The GPU holds the pulled blocks now; the runner may evict them.
				j.pull.release()
			}
		}
		r.mu.Unlock()
		r.publish(r.topic, r.gpuEvents(res.Events))
		if res.Idle() {
			r.signalIdle()
			select {
			case <-r.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		// The step's real work (filling, copying and hashing KV bytes)
		// stands for part of its simulated time, as a GPU's compute is its
		// step time: waiting the whole simulated cost after it made the
		// engines slower than configured, by as much as the host was busy.
		d := time.Duration(float64(res.Duration)/r.cfg.Speedup) - r.cfg.Clock.Now().Sub(start)
		if d > 0 {
			select {
			case <-r.cfg.Clock.After(d):
			case <-ctx.Done():
				return
			}
		}
		r.mu.Lock()
		for _, em := range res.Emits {
			if j := r.jobs[em.Seq]; j != nil {
				j.push(em.Token, em.Done)
				if em.Done {
					r.endLocked(j)
				}
			}
		}
		r.mu.Unlock()
	}
}

func (r *rank) signalIdle() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.sched.Busy() {
		close(r.changed)
		r.changed = make(chan struct{})
	}
}

// idle waits until the rank has no request queued or running.
func (r *rank) idle(ctx context.Context) error {
	for {
		r.mu.Lock()
		busy, ch := r.sched.Busy() || len(r.jobs) > 0, r.changed
		r.mu.Unlock()
		if !busy {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// submit queues j's sequence.
func (r *rank) submit(j *job) error {
	r.mu.Lock()
	err := r.sched.Add(j.seq)
	if err == nil {
		r.jobs[j.seq] = j
	}
	r.mu.Unlock()
	if err != nil {
		return err
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return nil
}

// abort stops j (its client went away) and frees its blocks.
func (r *rank) abort(j *job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.jobs[j.seq] != j {
		return
	}
	r.sched.Abort(j.seq)
	r.endLocked(j)
}

// endLocked forgets a finished or aborted job. Called with r.mu held.
func (r *rank) endLocked(j *job) {
	delete(r.jobs, j.seq)
	j.end()
	if !r.sched.Busy() && len(r.jobs) == 0 {
		close(r.changed)
		r.changed = make(chan struct{})
	}
}

// evict drops keys (nil: everything) from the chosen tiers, publishing the
// removals.
func (r *rank) evict(keys []uint64, gpu, run bool) (gpuN, runnerN int) {
	if gpu {
		r.mu.Lock()
		var evs []kvevents.Event
		gpuN, evs = r.sched.Evict(keys)
		r.mu.Unlock()
		r.publish(r.topic, r.gpuEvents(evs))
	}
	if run {
		runnerN = r.tier.evict(keys) // the runner sink publishes the removals
	}
	return gpuN, runnerN
}

// reset empties the GPU cache (AllBlocksCleared) and every runner shard.
func (r *rank) reset() (gpuN, runnerN int) {
	r.mu.Lock()
	gpuN, evs := r.sched.Reset()
	r.mu.Unlock()
	r.publish(r.topic, r.gpuEvents(evs))
	return gpuN, r.tier.evict(nil)
}

// gpuEvents dresses core events in the flavour's fields.
func (r *rank) gpuEvents(evs []kvevents.Event) []kvevents.Event {
	for i := range evs {
		ev := &evs[i]
		if ev.Kind == kvevents.KindCleared {
			continue
		}
		ev.Medium = mediumGPU
		r.cfg.dressLoRA(ev)
		if r.cfg.Flavor == VLLM {
			// vLLM publishes a salt only in a prefix's first block's
			// extra keys.
			if ev.HasParent {
				ev.CacheSalt = ""
			}
			ev.SpecKind = specKindFull
		}
	}
	return evs
}

// sink turns TP shard t's inventory into runner-owned events. With TP > 1
// a block is restorable only while every shard holds it, and the engine
// wire has no TP field. SGLang's per-rank linkers each report on their own
// shard topic (the state agent folds them); vLLM's connector reports
// through the engine core's scheduler, which speaks for all its TP workers
// (workerconfig.AggregateEngine), so the vLLM flavour folds the shards
// itself and publishes one inventory on the plain topic.
func (r *rank) sink(t int) runner.Sink {
	topic := r.topic
	if r.cfg.TP > 1 && r.cfg.Flavor == SGLang {
		topic = kvevents.RunnerShardTopic(r.topic, t)
	}
	tier, medium := kvevents.TierExternal, mediumExternal
	if r.cfg.Flavor == VLLM {
		tier, medium = kvevents.TierHost, mediumCPU
	}
	return runner.SinkFunc(func(inv runner.Inventory) {
		keys := inv.Keys
		switch {
		case r.cfg.TP > 1 && r.cfg.Flavor == VLLM:
			// Fold and publish under one lock so that a block's removal can
			// never overtake its store on the wire.
			r.shardsMu.Lock()
			defer r.shardsMu.Unlock()
			if keys = r.cat.fold(t, inv.Keys, inv.Removed, r.cfg.TP); len(keys) == 0 {
				return
			}
		case inv.Removed:
			r.cat.removed(t, inv.Keys)
		}
		var evs []kvevents.Event
		if inv.Removed {
			evs = []kvevents.Event{{Kind: kvevents.KindRemoved, BlockHashes: keys}}
		} else {
			evs = r.runnerStores(t, keys)
		}
		for i := range evs {
			evs[i].Tier, evs[i].Medium, evs[i].Ownership = tier, medium, kvevents.OwnedByRunner
		}
		r.publish(topic, evs)
	})
}

// runnerStores builds BlockStored events for keys a shard stored,
// coalescing chained blocks as the engines do. They carry the cache salt as
// the flavour's GPU stores do: SGLang's on every store, vLLM's in the extra
// keys of a prefix's first block only.
func (r *rank) runnerStores(t int, keys []uint64) []kvevents.Event {
	metas, ok := r.cat.stored(t, keys)
	var evs []kvevents.Event
	var salts []string // by event: the salt of its blocks
	for i, k := range keys {
		if !ok[i] {
			r.log.Warn("runner stored a block the engine cannot describe; not reported", "tp_rank", t, "key", k)
			continue
		}
		m := metas[i]
		if n := len(evs); n > 0 && m.hasParent && i > 0 && m.parent == keys[i-1] && ok[i-1] && salts[n-1] == m.salt && evs[n-1].LoRAName == m.lora {
			evs[n-1].BlockHashes = append(evs[n-1].BlockHashes, k)
			evs[n-1].TokenIDs = append(evs[n-1].TokenIDs, m.tokens...)
			continue
		}
		ev := kvevents.Event{
			Kind:        kvevents.KindStored,
			BlockHashes: []uint64{k},
			ParentHash:  m.parent,
			HasParent:   m.hasParent,
			TokenIDs:    append([]uint32(nil), m.tokens...),
			BlockSize:   r.cfg.BlockSize,
		}
		if r.cfg.Flavor == SGLang || !m.hasParent {
			ev.CacheSalt = m.salt
		}
		ev.LoRAName = m.lora
		r.cfg.dressLoRA(&ev)
		evs = append(evs, ev)
		salts = append(salts, m.salt)
	}
	return evs
}

func (r *rank) publish(topic string, evs []kvevents.Event) {
	if len(evs) == 0 || r.pub == nil {
		return
	}
	now := r.cfg.Clock.Now()
	b := kvevents.Batch{TS: float64(now.UnixNano()) / 1e9, DPRank: r.id, HasDPRank: true, Events: evs}
	payload, err := r.enc.Encode(b)
	if err != nil {
		r.log.Error("cannot encode KV events", "err", err)
		return
	}
	if _, err := r.pub.PublishEvents(topic, payload, evs); err != nil {
		r.log.Warn("cannot publish KV events", "err", err)
	}
}

func (r *rank) stats() schedStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sched.Stats()
}

// dressLoRA adds vLLM's lora_id beside an event's lora_name.
func (c *Config) dressLoRA(ev *kvevents.Event) {
	if ev.LoRAName != "" && c.Flavor == VLLM {
		ev.LoRAID, ev.HasLoRAID = c.loraID(ev.LoRAName), true
	}
}
