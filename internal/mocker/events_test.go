package mocker

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvhash"
	"kvrouter/internal/kvstream"
)

// sub is a live subscription to one DP rank's events.
type sub struct {
	t     *testing.T
	ch    chan kvstream.Item
	dec   kvevents.Decoder
	ctx   context.Context
	first bool
}

type received struct {
	topic string
	batch kvevents.Batch
}

func subscribe(t *testing.T, endpoint string) *sub {
	t.Helper()
	return subscribeWith(t, kvstream.Config{Endpoint: endpoint})
}

func subscribeWith(t *testing.T, cfg kvstream.Config) *sub {
	t.Helper()
	s, err := kvstream.NewSubscriber(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	ch := make(chan kvstream.Item, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Run(ctx, ch)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return &sub{t: t, ch: ch, ctx: ctx}
}

// warm makes sure every subscription is connected before the test starts:
// ZMQ drops what is published before a subscriber joins, so the engine is
// reset (one AllBlocksCleared per rank) until each has seen something.
func warm(t *testing.T, e *Engine, subs ...*sub) {
	t.Helper()
	for {
		post(t, e.URL()+pathAdminReset, map[string]any{}, nil)
		ready := true
		for _, s := range subs {
			if !s.first {
				s.first = s.poll(50 * time.Millisecond)
			}
			ready = ready && s.first
		}
		if ready {
			return
		}
		if testCtx(t).Err() != nil {
			t.Fatal("subscribers never connected")
		}
	}
}

// poll waits up to d for one message and reports whether one came.
func (s *sub) poll(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case it := <-s.ch:
			if _, ok := it.(kvstream.Message); ok {
				return true
			}
		case <-timer.C:
			return false
		case <-s.ctx.Done():
			return false
		}
	}
}

// until reads batches until done returns true, and returns them all.
func (s *sub) until(done func(received) bool) []received {
	s.t.Helper()
	var out []received
	for {
		select {
		case it := <-s.ch:
			m, ok := it.(kvstream.Message)
			if !ok {
				s.t.Fatalf("stream signal %#v", it)
			}
			b, err := s.dec.Decode(m.Payload)
			if err != nil {
				s.t.Fatalf("decode seq %d: %v", m.Seq, err)
			}
			r := received{topic: m.Topic, batch: b}
			out = append(out, r)
			if done(r) {
				return out
			}
		case <-s.ctx.Done():
			s.t.Fatalf("events never arrived; got %d batches", len(out))
		}
	}
}

// keysOf collects the block hashes of events of kind and tier, and checks
// each stored one against want's blocks.
type eventFilter struct {
	kind  kvevents.Kind
	tier  kvevents.Tier
	owner kvevents.Ownership
	topic string
}

func (f eventFilter) keys(rs []received) []uint64 {
	var keys []uint64
	for _, r := range rs {
		if r.topic != f.topic {
			continue
		}
		for _, ev := range r.batch.Events {
			if ev.Kind == f.kind && (f.kind == kvevents.KindCleared || ev.Tier == f.tier && ev.Ownership == f.owner) {
				keys = append(keys, ev.BlockHashes...)
				if f.kind == kvevents.KindCleared {
					keys = append(keys, 0)
				}
			}
		}
	}
	return keys
}

// collectKeys reads until every filter has seen all of want.
func (s *sub) collectKeys(want map[eventFilter][]uint64) []received {
	s.t.Helper()
	var all []received
	s.until(func(r received) bool {
		all = append(all, r)
		for f, keys := range want {
			got := f.keys(all)
			for _, k := range keys {
				if !slices.Contains(got, k) {
					return false
				}
			}
		}
		return true
	})
	return all
}

func portOf(t *testing.T, endpoint string) int {
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(u.Port())
	return p
}

// TestEventsDP2: each DP rank publishes on its own offset port; a request
// placed on rank 1 shows up there as GPU stores, then runner-owned EXTERNAL
// stores; admin evict publishes removals on both tiers; reset publishes
// AllBlocksCleared.
func TestEventsDP2(t *testing.T) {
	e := startEngine(t, func(c *Config) { c.DP = 2; c.Topic = "kv-events" })
	if p0, p1 := portOf(t, e.EventEndpoint(0)), portOf(t, e.EventEndpoint(1)); p1 != p0+1 {
		t.Fatalf("rank ports %d and %d, want consecutive", p0, p1)
	}
	s0, s1 := subscribe(t, e.EventEndpoint(0)), subscribe(t, e.EventEndpoint(1))
	warm(t, e, s0, s1)

	prompt := longPrompt(t, e, "dp", 300)
	tokens := tokenize(t, e, prompt)
	keys := kvhash.SGLangPageHashes(tokens, 64, "")
	body := peerBody(prompt, nil)
	body["dp_rank"] = 1
	if got := complete(t, e, body); got.Usage.KVRouter.DPRank != 1 {
		t.Fatalf("ran on rank %d", got.Usage.KVRouter.DPRank)
	}
	gpu := eventFilter{kind: kvevents.KindStored, tier: kvevents.TierDevice, topic: "kv-events"}
	ext := eventFilter{kind: kvevents.KindStored, tier: kvevents.TierExternal, owner: kvevents.OwnedByRunner, topic: "kv-events"}
	stored := s1.collectKeys(map[eventFilter][]uint64{gpu: keys, ext: keys})
	for _, r := range stored {
		if r.batch.DPRank != 1 || !r.batch.HasDPRank {
			t.Fatalf("batch stamped rank %d/%v on rank 1's socket", r.batch.DPRank, r.batch.HasDPRank)
		}
		for _, ev := range r.batch.Events {
			if ev.Kind != kvevents.KindStored {
				continue
			}
			first := slices.Index(keys, ev.BlockHashes[0])
			if first < 0 || !slices.Equal(ev.TokenIDs, tokens[first*64:(first+len(ev.BlockHashes))*64]) || ev.BlockSize != 64 {
				t.Fatalf("stored event with wrong tokens or block size: %+v", ev)
			}
			if first > 0 && (!ev.HasParent || ev.ParentHash != keys[first-1]) {
				t.Fatalf("stored event without its parent: %+v", ev)
			}
			if wantMedium := map[kvevents.Tier]string{kvevents.TierDevice: mediumGPU, kvevents.TierExternal: mediumExternal}[ev.Tier]; ev.Medium != wantMedium {
				t.Fatalf("medium %q for tier %v", ev.Medium, ev.Tier)
			}
		}
	}
	assertMetric(t, e, metricGPUCached+`{dp_rank="0"} 0`)

	// The header picks the rank too.
	req, _ := http.NewRequest(http.MethodPost, e.URL()+pathCompletions, jsonBody(t, map[string]any{"prompt": []int{1, 2, 3}, "max_tokens": 1}))
	req.Header.Set(headerDPRank, "1")
	var c completion
	doJSON(t, req, &c)
	if c.Usage.KVRouter.DPRank != 1 {
		t.Fatalf("header routed to rank %d", c.Usage.KVRouter.DPRank)
	}

	var ev evictResponse
	post(t, e.URL()+pathAdminEvict, map[string]any{"tier": "all", "prompt": prompt, "dp_rank": 1}, &ev)
	if ev.GPU != len(keys) || ev.Runner != len(keys) {
		t.Fatalf("evicted %+v, want %d from each tier", ev, len(keys))
	}
	gpuRm := eventFilter{kind: kvevents.KindRemoved, tier: kvevents.TierDevice, topic: "kv-events"}
	extRm := eventFilter{kind: kvevents.KindRemoved, tier: kvevents.TierExternal, owner: kvevents.OwnedByRunner, topic: "kv-events"}
	s1.collectKeys(map[eventFilter][]uint64{gpuRm: keys, extRm: keys})

	post(t, e.URL()+pathAdminReset, map[string]any{}, nil)
	s1.collectKeys(map[eventFilter][]uint64{{kind: kvevents.KindCleared, topic: "kv-events"}: {0}})
}

// TestEventsTP2Shards: with TP 2 each runner shard reports its inventory
// under its own shard topic; GPU events keep the plain topic.
func TestEventsTP2Shards(t *testing.T) {
	e := startEngine(t, func(c *Config) { c.TP = 2; c.Topic = "kv" })
	s := subscribe(t, e.EventEndpoint(0))
	warm(t, e, s)
	prompt := longPrompt(t, e, "shards", 200)
	keys := kvhash.SGLangPageHashes(tokenize(t, e, prompt), 64, "")
	complete(t, e, peerBody(prompt, nil))
	want := map[eventFilter][]uint64{{kind: kvevents.KindStored, tier: kvevents.TierDevice, topic: "kv"}: keys}
	for tp := range 2 {
		f := eventFilter{kind: kvevents.KindStored, tier: kvevents.TierExternal, owner: kvevents.OwnedByRunner, topic: kvevents.RunnerShardTopic("kv", tp)}
		want[f] = keys
	}
	s.collectKeys(want)
}

// TestEventsVLLM: the vLLM flavour reports GPU blocks with its sha256_cbor
// hashes and runner-owned blocks as ownership kvcr on medium CPU; a peer
// restore reads the hint from kv_transfer_params.kv_hint.
func TestEventsVLLM(t *testing.T) {
	vllm := func(c *Config) { c.Flavor = VLLM; c.HashSeed = "0" }
	a := startEngine(t, vllm)
	s := subscribe(t, a.EventEndpoint(0))
	warm(t, a, s)
	prompt := longPrompt(t, a, "vllm", 300)
	tokens := tokenize(t, a, prompt)
	keys := kvhash.VLLMBlockHashes(tokens, 64, "0")
	onA := complete(t, a, map[string]any{"prompt": prompt, "max_tokens": 8})
	gpu := eventFilter{kind: kvevents.KindStored, tier: kvevents.TierDevice}
	cpu := eventFilter{kind: kvevents.KindStored, tier: kvevents.TierHost, owner: kvevents.OwnedByRunner}
	for _, r := range s.collectKeys(map[eventFilter][]uint64{gpu: keys, cpu: keys}) {
		for _, ev := range r.batch.Events {
			switch {
			case ev.Tier == kvevents.TierDevice && (ev.SpecKind != specKindFull || ev.Medium != mediumGPU):
				t.Fatalf("GPU event %+v", ev)
			case ev.Tier == kvevents.TierHost && ev.Medium != mediumCPU:
				t.Fatalf("runner event %+v", ev)
			}
		}
	}

	b := startEngine(t, vllm)
	hint := map[string]any{"kv_hint": envelopeFor(a.ControlEndpoint(0), keys)}
	onB := complete(t, b, map[string]any{"prompt": prompt, "max_tokens": 8, "kv_transfer_params": hint})
	if onB.Usage.KVRouter.PeerRestoredTokens != len(keys)*64 || onB.text() != onA.text() {
		t.Fatalf("vLLM restore: %d tokens, %q vs %q", onB.Usage.KVRouter.PeerRestoredTokens, onB.text(), onA.text())
	}
	// The SGLang placement means nothing to a vLLM engine.
	c := startEngine(t, vllm)
	if got := complete(t, c, map[string]any{"prompt": prompt, "max_tokens": 8, "kv_hints": hint["kv_hint"]}); got.Usage.KVRouter.PeerRestoredTokens != 0 {
		t.Fatal("a vLLM engine read the SGLang placement")
	}
}

// TestEventsConnect: with --kv-events-connect the engine dials a binding
// subscriber (llm-d style) under the topic kv@<host>:<port>@<model>.
func TestEventsConnect(t *testing.T) {
	port := freePorts(t, 3) // subscriber, runner, replay: disjoint by construction
	sb := subscribeWith(t, kvstream.Config{Endpoint: "tcp://127.0.0.1:" + strconv.Itoa(port), Bind: true})

	e := startEngine(t, func(c *Config) {
		c.EventsConnect = "tcp://127.0.0.1:" + strconv.Itoa(port)
		c.ControlPort, c.EventsEndpoint, c.ReplayEndpoint = port+1, "unused", "tcp://*:"+strconv.Itoa(port+2)
	})
	warm(t, e, sb)
	topic := "kv@127.0.0.1:" + strconv.Itoa(e.httpPort()) + "@" + DefaultModel
	prompt := longPrompt(t, e, "connect", 200)
	keys := kvhash.SGLangPageHashes(tokenize(t, e, prompt), 64, "")
	complete(t, e, peerBody(prompt, nil))
	sb.collectKeys(map[eventFilter][]uint64{{kind: kvevents.KindStored, tier: kvevents.TierDevice, topic: topic}: keys})
}

// TestEventsSGLangArray: the older positional form carries the cache salt
// and marks runner-owned blocks with medium EXTERNAL.
func TestEventsSGLangArray(t *testing.T) {
	e := startEngine(t, func(c *Config) { c.EventFormat = FormatArray })
	s := subscribe(t, e.EventEndpoint(0))
	warm(t, e, s)
	prompt := longPrompt(t, e, "array", 200)
	keys := kvhash.SGLangPageHashes(tokenize(t, e, prompt), 64, "tenant-a")
	body := peerBody(prompt, nil)
	body["cache_salt"] = "tenant-a"
	complete(t, e, body)
	gpu := eventFilter{kind: kvevents.KindStored, tier: kvevents.TierDevice}
	ext := eventFilter{kind: kvevents.KindStored, tier: kvevents.TierExternal, owner: kvevents.OwnedByRunner}
	for _, r := range s.collectKeys(map[eventFilter][]uint64{gpu: keys, ext: keys}) {
		for _, ev := range r.batch.Events {
			if ev.Kind == kvevents.KindStored && ev.CacheSalt != "tenant-a" {
				t.Fatalf("stored event without its salt: %+v", ev)
			}
		}
	}
}

// TestEventsVLLMTP2FoldsShards: vLLM's connector reports through the
// engine core, which speaks for all its TP workers, so the vLLM flavour
// publishes a runner-owned block once, on the plain topic, when its last
// shard stores it, and withdraws it at the first shard's eviction.
func TestEventsVLLMTP2FoldsShards(t *testing.T) {
	e := startEngine(t, func(c *Config) { c.Flavor = VLLM; c.HashSeed = "0"; c.TP = 2; c.Topic = "kv" })
	s := subscribe(t, e.EventEndpoint(0))
	warm(t, e, s)
	prompt := longPrompt(t, e, "vllm-shards", 200)
	keys := kvhash.VLLMBlockHashes(tokenize(t, e, prompt), 64, "0")
	complete(t, e, map[string]any{"prompt": prompt, "max_tokens": 4})
	cpu := eventFilter{kind: kvevents.KindStored, tier: kvevents.TierHost, owner: kvevents.OwnedByRunner, topic: "kv"}
	got := s.collectKeys(map[eventFilter][]uint64{cpu: keys})
	seen := map[uint64]int{}
	for _, r := range got {
		if _, _, shard := kvevents.ParseRunnerShardTopic(r.topic); shard {
			t.Fatalf("vLLM published on a shard topic %q", r.topic)
		}
		for _, k := range cpu.keys([]received{r}) {
			seen[k]++
		}
	}
	for _, k := range keys {
		if seen[k] != 1 {
			t.Fatalf("block %x published %d times as runner-owned, want once for both shards", k, seen[k])
		}
	}
	post(t, e.URL()+pathAdminEvict, map[string]any{"tier": "runner", "prompt": prompt}, nil)
	rm := eventFilter{kind: kvevents.KindRemoved, tier: kvevents.TierHost, owner: kvevents.OwnedByRunner, topic: "kv"}
	s.collectKeys(map[eventFilter][]uint64{rm: keys})
}

// TestEventsVLLMSaltedRunnerStores: the vLLM flavour's runner-owned stores
// name a salted prefix's salt as its GPU stores do, in the extra keys of
// the prefix's first block, so that a consumer can tell the runner's copy
// of tenant A's prefix from an unsalted one.
func TestEventsVLLMSaltedRunnerStores(t *testing.T) {
	e := startEngine(t, func(c *Config) { c.Flavor = VLLM; c.HashSeed = "0" })
	s := subscribe(t, e.EventEndpoint(0))
	warm(t, e, s)
	prompt := longPrompt(t, e, "salted-runner", 300)
	keys := e.cfg.engineHashes(tokenize(t, e, prompt), "tenant-a", "")
	body := peerBody(prompt, nil)
	body["cache_salt"] = "tenant-a"
	complete(t, e, body)
	gpu := eventFilter{kind: kvevents.KindStored, tier: kvevents.TierDevice}
	cpu := eventFilter{kind: kvevents.KindStored, tier: kvevents.TierHost, owner: kvevents.OwnedByRunner}
	roots := 0
	for _, r := range s.collectKeys(map[eventFilter][]uint64{gpu: keys, cpu: keys}) {
		for _, ev := range r.batch.Events {
			if ev.Kind != kvevents.KindStored {
				continue
			}
			switch {
			case !ev.ExtraKeys:
				t.Fatalf("store without extra_keys: %+v", ev)
			case !ev.HasParent && ev.CacheSalt != "tenant-a":
				t.Fatalf("root store without its salt: %+v", ev)
			case ev.HasParent && ev.CacheSalt != "":
				t.Fatalf("salt on a store under a parent: %+v", ev)
			case !ev.HasParent && ev.Ownership == kvevents.OwnedByRunner:
				roots++
			}
		}
	}
	if roots == 0 {
		t.Fatal("no runner-owned root store seen")
	}
}
