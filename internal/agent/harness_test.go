package agent

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"kvrouter/internal/index"
	"kvrouter/internal/index/indextest"
	"kvrouter/internal/kvencode"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvstream"
	"kvrouter/internal/relay"
	"kvrouter/internal/workerconfig"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// engineConfig reads a testdata engine configuration and lets patch change
// it; JSON-text options (SGLang's extra config and events config) are
// patched as objects under their own names.
func engineConfig(t testing.TB, name string, patch func(cfg, extra, events map[string]any)) []byte {
	t.Helper()
	raw, err := os.ReadFile("testdata/" + name + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	text := func(key string) map[string]any {
		m := map[string]any{}
		switch v := cfg[key].(type) {
		case string:
			if err := json.Unmarshal([]byte(v), &m); err != nil {
				t.Fatal(err)
			}
		case map[string]any:
			m = v
		}
		return m
	}
	extra := text("hicache_storage_backend_extra_config")
	if _, ok := cfg["kv_transfer_config"]; ok {
		extra = cfg["kv_transfer_config"].(map[string]any)["kv_connector_extra_config"].(map[string]any)["secondary_tiers"].([]any)[0].(map[string]any)
	}
	events := text("kv_events_config")
	if patch != nil {
		patch(cfg, extra, events)
	}
	if _, ok := cfg["hicache_storage_backend_extra_config"]; ok {
		b, _ := json.Marshal(extra)
		cfg["hicache_storage_backend_extra_config"] = string(b)
	}
	if _, ok := cfg["kv_events_config"].(string); ok {
		b, _ := json.Marshal(events)
		cfg["kv_events_config"] = string(b)
	}
	out, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func descriptor(t testing.TB, engine workerconfig.Engine, name string) *workerconfig.Descriptor {
	t.Helper()
	d, err := workerconfig.Build(engine, engineConfig(t, name, nil), workerconfig.Options{AllowLoopback: true})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// memPlane is the event plane inside one process: it commits like
// relay.Publisher (change first, message only if it succeeded) and keeps
// the stream for the test to replay into consumers.
type memPlane struct {
	mu  sync.Mutex
	log []relay.Message
}

func (p *memPlane) Commit(src index.Source, kind relay.Kind, ops []index.Op, change func() error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if change != nil {
		if err := change(); err != nil {
			return err
		}
	}
	p.log = append(p.log, relay.Message{Cursor: uint64(len(p.log) + 1), Source: src, Kind: kind, Ops: slices.Clone(ops)})
	return nil
}

// snapshot takes the states under the plane's lock, as ServeSnapshots does.
func (p *memPlane) snapshot(c *Core) []relay.State {
	p.mu.Lock()
	defer p.mu.Unlock()
	return c.States()
}

// mirror is a consumer of the stream, as a router's follower builds it.
type mirror struct {
	ix    *index.Index
	ready map[index.Source]bool
	known map[index.Source]bool
}

func newMirror(t testing.TB, bs int) *mirror {
	ix, err := index.New(index.Config{BlockSize: bs})
	if err != nil {
		t.Fatal(err)
	}
	return &mirror{ix: ix, ready: map[index.Source]bool{}, known: map[index.Source]bool{}}
}

func (m *mirror) apply(t testing.TB, msg relay.Message) {
	t.Helper()
	m.known[msg.Source] = true
	switch msg.Kind {
	case relay.KindOps:
		if err := m.ix.Apply(msg.Source, msg.Ops...); err != nil {
			t.Fatalf("consumer refused message %d (%s): %v", msg.Cursor, msg.Source, err)
		}
	case relay.KindReset:
		m.ix.RemoveSource(msg.Source)
		m.ready[msg.Source] = false
	case relay.KindReady:
		m.ready[msg.Source] = true
	case relay.KindGone:
		m.ix.RemoveSource(msg.Source)
		delete(m.ready, msg.Source)
		delete(m.known, msg.Source)
	}
}

// install applies a snapshot the way relay.Publisher frames it.
func (m *mirror) install(t testing.TB, states []relay.State) {
	for _, st := range states {
		m.apply(t, relay.Message{Source: st.Source, Kind: relay.KindReset})
		if len(st.Ops) > 0 {
			m.apply(t, relay.Message{Source: st.Source, Kind: relay.KindOps, Ops: st.Ops})
		}
		if st.Ready {
			m.apply(t, relay.Message{Source: st.Source, Kind: relay.KindReady})
		}
	}
}

// harness drives a Core with engine items and checks, after every step,
// that a consumer of its stream mirrors it and that a snapshot agrees.
type harness struct {
	t      *testing.T
	tr     *indextest.Tree
	core   *Core
	plane  *memPlane
	live   *mirror
	read   int
	alias  map[index.Source]string
	byName map[string]index.Source
	seq    map[int]uint64
	topic  string
	enc    kvencode.Encoder
}

func newHarness(t *testing.T, engine workerconfig.Engine, config string) *harness {
	t.Helper()
	d := descriptor(t, engine, config)
	h := &harness{t: t, plane: &memPlane{}, alias: map[index.Source]string{}, byName: map[string]index.Source{}, seq: map[int]uint64{}}
	h.enc.Format = kvencode.SGLangMap
	if engine == workerconfig.EngineVLLM {
		h.enc.Format = kvencode.VLLMMap
	}
	h.topic = d.Events[0].Topic
	core, err := NewCore("w", d, h.plane, quiet())
	if err != nil {
		t.Fatal(err)
	}
	h.core = core
	h.live = newMirror(t, d.KVBlockSize)
	h.tr = indextest.NewTree(d.KVBlockSize, "A:", "B:A", "C:B", "D:C", "X:", "Y:X")
	for _, dp := range d.DPRanks {
		h.name(fmt.Sprintf("w%d", dp), index.WorkerRank("w", dp))
		if id, ok := d.OwnerIDs[dp]; ok {
			h.name(fmt.Sprintf("o%d", dp), index.CacheOwner(id))
		}
	}
	return h
}

func (h *harness) name(n string, s index.Source) { h.alias[s], h.byName[n] = n, s }

// ev builds an engine event on blocks of the harness tree.
func (h *harness) ev(kind string, runner bool, names ...string) kvevents.Event {
	return treeEvent(h.tr, h.enc.Format == kvencode.VLLMMap, kind, runner, names...)
}

// treeEvent builds an engine event on blocks of t: kind is "store",
// "remove" or "clear"; runner events are runner-owned (SGLang reports them
// as EXTERNAL, vLLM as ownership kvcr on the host tier).
func treeEvent(t *indextest.Tree, vllm bool, kind string, runner bool, names ...string) kvevents.Event {
	ev := kvevents.Event{Tier: kvevents.TierDevice}
	if runner {
		ev.Ownership, ev.Tier = kvevents.OwnedByRunner, kvevents.TierExternal
		if vllm {
			ev.Tier = kvevents.TierHost
		}
	}
	switch kind {
	case "store":
		op := t.StoreOp(ev.Tier, names...)
		ev.Kind, ev.BlockHashes, ev.ParentHash, ev.HasParent, ev.BlockSize = kvevents.KindStored, op.Hashes, op.Parent, op.HasParent, t.BlockSize
		for _, n := range names {
			ev.TokenIDs = append(ev.TokenIDs, t.Tokens[n]...)
		}
	case "remove":
		ev.Kind, ev.BlockHashes = kvevents.KindRemoved, t.RemoveOp(ev.Tier, names...).Hashes
	case "clear":
		ev.Kind, ev.Tier = kvevents.KindCleared, 0
	}
	return ev
}

// msg encodes a batch as DP rank dp's next message on topic ("" for the
// engine's own topic).
func (h *harness) msg(dp int, topic string, evs ...kvevents.Event) kvstream.Message {
	h.t.Helper()
	if topic == "" {
		topic = h.topic
	}
	payload, err := h.enc.Encode(kvevents.Batch{TS: 1700000000.5, DPRank: dp, HasDPRank: true, Events: evs})
	if err != nil {
		h.t.Fatal(err)
	}
	m := kvstream.Message{Key: "k", Topic: topic, Seq: h.seq[dp], Payload: payload}
	h.seq[dp]++
	return m
}

// feed hands items of DP rank dp to the core and checks the invariants.
func (h *harness) feed(dp int, items ...kvstream.Item) {
	h.t.Helper()
	for _, it := range items {
		h.core.Handle(dp, it)
		h.check()
	}
}

func (h *harness) check() {
	h.t.Helper()
	h.plane.mu.Lock()
	news := h.plane.log[h.read:]
	h.read = len(h.plane.log)
	h.plane.mu.Unlock()
	for _, m := range news {
		h.live.apply(h.t, m)
	}
	snap := newMirror(h.t, h.tr.BlockSize)
	snap.install(h.t, h.plane.snapshot(h.core))
	ready := h.core.Readiness()
	for _, src := range h.byName {
		local := h.tr.DumpSet(h.t, h.core.loc.ix, src)
		live, fromSnap := h.tr.DumpSet(h.t, h.live.ix, src), h.tr.DumpSet(h.t, snap.ix, src)
		if live != fromSnap || h.live.ready[src] != snap.ready[src] {
			h.t.Fatalf("%s: live consumer holds %q ready %v, a snapshot gives %q ready %v",
				h.alias[src], live, h.live.ready[src], fromSnap, snap.ready[src])
		}
		if h.live.ready[src] != ready[src] {
			h.t.Fatalf("%s: consumer ready %v, agent ready %v", h.alias[src], h.live.ready[src], ready[src])
		}
		if h.core.loc.isAttached(src) && live != local {
			h.t.Fatalf("%s: attached, consumer holds %q, agent %q", h.alias[src], live, local)
		}
		if !h.core.loc.isAttached(src) && (live != "" || ready[src]) {
			h.t.Fatalf("%s: detached, consumer holds %q ready %v", h.alias[src], live, ready[src])
		}
	}
}

// published returns the messages since the last call as "kind:alias"
// words, and forgets them.
func (h *harness) published() string {
	h.plane.mu.Lock()
	defer h.plane.mu.Unlock()
	var w []string
	for _, m := range h.plane.log {
		w = append(w, fmt.Sprintf("%s:%s", kindNames[m.Kind], h.alias[m.Source]))
	}
	h.plane.log, h.read = nil, 0
	return strings.Join(w, " ")
}

// expect checks what was published since the last expect, what each named
// source holds at the consumer ("w0=A@0 B@0"), and which sources are ready.
func (h *harness) expect(published string, holdings string, ready string) {
	h.t.Helper()
	if got := h.published(); got != published {
		h.t.Errorf("published %q, want %q", got, published)
	}
	for _, part := range strings.Split(holdings, ";") {
		name, want, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		if got := h.tr.DumpSet(h.t, h.live.ix, h.byName[name]); got != want {
			h.t.Errorf("%s holds %q, want %q", name, got, want)
		}
	}
	var got []string
	for src, r := range h.core.Readiness() {
		if r {
			got = append(got, h.alias[src])
		}
	}
	slices.Sort(got)
	if g := strings.Join(got, " "); g != ready {
		h.t.Errorf("ready %q, want %q", g, ready)
	}
	if h.t.Failed() {
		h.t.FailNow()
	}
}
