package ingest

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"kvrouter/internal/index"
	"kvrouter/internal/index/indextest"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvhash"
)

// TestCore runs the behaviour suite: every file under testdata/ drives a
// core with the commands below and checks what it told its output.
//
//	init [ranks=N] [owners=all|none|0,1,...] [tp=N] [salts] [lossy] [probe] [runners=N]
//	    A core of N DP ranks (default 1) of worker w, block size 4, whose
//	    ranks' sources are named w<dp> and o<dp>; probe: a runner prober
//	    reports the owners' runners (Config.ProbeRunners), runners= of
//	    them per rank.
//	batch [dp=N] [seq=N] [shard=N] [epoch=E] [replayed] [malformed]
//	    A batch; one event per input line (below). Seqs count up per rank
//	    from 0 unless seq= says. shard= puts it on a runner shard topic.
//	gap|healed|lost [dp=N] from=N to=N
//	restart [dp=N] old=N new=N   (the next batch's seq is new=)
//	reconnect [dp=N]
//	engine up|down               (every rank, in order)
//	runner [dp=N] [tp=N] up epoch=N|down|expired
//	snapshot [dp=N] resume=N [epoch=E]
//	    The engine's cut: one input line of the block names it holds.
//	fail                         the output refuses its next Apply
//	state                        each source's readiness and holdings
//
// Events: "store|remove|clear [runner] [tier=N] [salt=S] [group=N]
// [kind=K] [bs=N] [short] [placeholder] [root] [keyless] NAMES..." on the tree
// A: B:A C:B D:C X: Y:X. A store is under its first block's tree parent
// unless root; runner events are runner-owned, on tier 3 unless tier=
// says; short drops a token, bs= claims another block size, keyless
// sends a store without vLLM's extra_keys.
//
// The output lines: "ready|not-ready SRC", "reset SRC", "count CLASS
// REASON", and "apply SRC: OPS" with " -> refused ..." when the output
// refused an op. Ops render as "store@TIER [under P:] NAMES", identity
// stores (folded TP shards) as "store@TIER ids: NAMES", "remove@TIER
// NAMES", "clear" or "clear@TIER"; a block hashed with salt S renders as
// NAME/S, one whose identity matches no known salt as NAME?.
func TestCore(t *testing.T) {
	files, err := filepath.Glob("testdata/*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			e := &env{t: t, tr: indextest.NewTree(4, "A:", "B:A", "C:B", "D:C", "X:", "Y:X")}
			runDD(t, f, e.do)
		})
	}
}

// env is one data-driven file's state.
type env struct {
	t     *testing.T
	tr    *indextest.Tree
	core  *Core
	out   *recorder
	ranks []int
	seq   map[int]uint64
	salts []string // salts the file named, to render blocks with
}

func (e *env) do(c *ddCase) string {
	e.t.Helper()
	if c.cmd != "init" && e.core == nil {
		e.t.Fatalf("%s: %s before init", c.pos, c.cmd)
	}
	if e.out != nil {
		e.out.log.Reset()
	}
	step := func(dp int, in Input) {
		if err := e.core.Step(dp, in); err != nil {
			fmt.Fprintf(&e.out.log, "error: %v\n", err)
		}
	}
	dp := c.int(e.t, "dp", 0)
	span := func() (uint64, uint64) { return uint64(c.int(e.t, "from", 0)), uint64(c.int(e.t, "to", 0)) }
	switch c.cmd {
	case "init":
		return e.init(c)
	case "batch":
		step(dp, e.batch(c, dp))
	case "gap", "healed":
		from, to := span()
		step(dp, Gap{From: from, To: to, Healed: c.cmd == "healed"})
	case "lost":
		from, to := span()
		step(dp, Unrecoverable{From: from, To: to})
	case "restart":
		step(dp, Restart{OldSeq: uint64(c.int(e.t, "old", 0)), NewSeq: uint64(c.int(e.t, "new", 0))})
		e.seq[dp] = uint64(c.int(e.t, "new", 0))
	case "reconnect":
		step(dp, Reconnected{})
	case "engine":
		for _, r := range e.ranks {
			step(r, Engine{Up: c.has("up")})
		}
	case "runner":
		in := Runner{TP: c.int(e.t, "tp", 0), Epoch: uint64(c.int(e.t, "epoch", 0))}
		switch {
		case c.has("down"):
			in.State = RunnerDown
		case c.has("expired"):
			in.State = RunnerExpired
		}
		step(dp, in)
	case "snapshot":
		in := Snapshot{Epoch: c.str("epoch", ""), ResumeSeq: uint64(c.int(e.t, "resume", 0))}
		for _, line := range c.input {
			for _, n := range strings.Fields(line) {
				h, ok := e.tr.Engine[n]
				if !ok {
					e.t.Fatalf("%s: snapshot: unknown block %q", c.pos, n)
				}
				b := kvevents.SnapshotBlock{Hashes: []uint64{h}}
				if p := e.tr.Parent[n]; p != "" {
					b.Parent, b.HasParent = e.tr.Engine[p], true
				}
				in.Blocks = append(in.Blocks, b)
			}
		}
		step(dp, in)
	case "fail":
		e.out.fail = true
		return ""
	case "state":
		return e.state()
	default:
		e.t.Fatalf("%s: unknown command %q", c.pos, c.cmd)
	}
	return e.out.log.String()
}

func (e *env) init(c *ddCase) string {
	n := c.int(e.t, "ranks", 1)
	owners := c.str("owners", "all")
	cfg := Config{BlockSize: e.tr.BlockSize, TP: c.int(e.t, "tp", 1), InheritSalt: c.has("salts"), Lossy: c.has("lossy"), ProbeRunners: c.has("probe"), Runners: c.int(e.t, "runners", 0),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ix, err := index.New(index.Config{BlockSize: e.tr.BlockSize})
	if err != nil {
		e.t.Fatal(err)
	}
	e.out = &recorder{e: e, ix: ix, names: map[index.Source]string{}, ready: map[index.Source]bool{}}
	e.seq, e.ranks = map[int]uint64{}, nil
	for dp := range n {
		r := Rank{DP: dp, Worker: index.WorkerRank("w", dp)}
		e.out.name(r.Worker, fmt.Sprintf("w%d", dp))
		if owners == "all" || slices.Contains(strings.Split(owners, ","), fmt.Sprint(dp)) {
			r.Owner, r.HasOwner = index.CacheOwner(fmt.Sprintf("o%d", dp)), true
			e.out.name(r.Owner, fmt.Sprintf("o%d", dp))
		}
		cfg.Ranks = append(cfg.Ranks, r)
		e.ranks = append(e.ranks, dp)
	}
	if e.core, err = New(cfg, e.out); err != nil {
		return "error: " + err.Error()
	}
	return "ok"
}

// batch builds the batch of a batch command.
func (e *env) batch(c *ddCase, dp int) Batch {
	seq := e.seq[dp]
	if c.has("seq") {
		seq = uint64(c.int(e.t, "seq", 0))
	}
	e.seq[dp] = seq + 1
	b := Batch{Topic: "kv", Epoch: c.str("epoch", ""), Seq: seq, Replayed: c.has("replayed")}
	if c.has("shard") {
		b.Topic = kvevents.RunnerShardTopic(b.Topic, c.int(e.t, "shard", 0))
	}
	if c.has("malformed") {
		b.Err = errors.New("malformed payload")
	}
	for _, line := range c.input {
		b.Events = append(b.Events, e.event(c, line))
	}
	return b
}

// event parses one event line of a batch.
func (e *env) event(c *ddCase, line string) kvevents.Event {
	words := strings.Fields(line)
	// As vLLM and the simulated engine send them, stores carry extra_keys
	// unless keyless.
	ev := kvevents.Event{Tier: kvevents.TierDevice, ExtraKeys: true}
	var names []string
	root, short := false, false
	bs := e.tr.BlockSize
	tier := -1
	for _, w := range words[1:] {
		k, v, _ := strings.Cut(w, "=")
		var err error
		switch k {
		case "runner":
			ev.Ownership = kvevents.OwnedByRunner
		case "tier":
			_, err = fmt.Sscan(v, &tier)
		case "salt":
			ev.CacheSalt = v
			if !slices.Contains(e.salts, v) {
				e.salts = append(e.salts, v)
			}
		case "group":
			_, err = fmt.Sscan(v, &ev.GroupIdx)
		case "kind":
			ev.SpecKind = v
		case "bs":
			_, err = fmt.Sscan(v, &bs)
		case "short":
			short = true
		case "placeholder":
			ev.Placeholder = true
		case "root":
			root = true
		case "keyless":
			ev.ExtraKeys = false
		default:
			if _, ok := e.tr.Engine[w]; !ok {
				e.t.Fatalf("%s: event %q: unknown word %q", c.pos, line, w)
			}
			names = append(names, w)
		}
		if err != nil {
			e.t.Fatalf("%s: event %q: %s: %v", c.pos, line, w, err)
		}
	}
	switch {
	case tier >= 0:
		ev.Tier = kvevents.Tier(tier)
	case ev.Ownership == kvevents.OwnedByRunner:
		ev.Tier = kvevents.TierExternal
	}
	switch words[0] {
	case "store":
		ev.Kind, ev.BlockSize = kvevents.KindStored, bs
		if p := e.tr.Parent[names[0]]; p != "" && !root {
			ev.ParentHash, ev.HasParent = e.tr.Engine[p], true
		}
		for _, n := range names {
			ev.BlockHashes = append(ev.BlockHashes, e.tr.Engine[n])
			if !ev.Placeholder {
				ev.TokenIDs = append(ev.TokenIDs, e.tr.Tokens[n]...)
			}
		}
		if short {
			ev.TokenIDs = ev.TokenIDs[:len(ev.TokenIDs)-1]
		}
	case "remove":
		ev.Kind = kvevents.KindRemoved
		for _, n := range names {
			ev.BlockHashes = append(ev.BlockHashes, e.tr.Engine[n])
		}
	case "clear":
		ev.Kind = kvevents.KindCleared
		if tier < 0 {
			ev.Tier = 0
		}
	default:
		e.t.Fatalf("%s: event %q: want store, remove or clear", c.pos, line)
	}
	return ev
}

// state renders each source's readiness and what it holds.
func (e *env) state() string {
	var b strings.Builder
	for _, s := range e.out.order {
		ready := "not-ready"
		if e.out.ready[s] {
			ready = "ready"
		}
		var held []string
		for _, op := range e.out.ix.Dump(s) {
			for i, h := range op.Hashes {
				held = append(held, e.identity(h, op.Seqs[i], op.Depths[i])+fmt.Sprintf("@%d", op.Tier))
			}
		}
		slices.Sort(held)
		fmt.Fprintf(&b, "%s %s", e.out.names[s], ready)
		if len(held) > 0 {
			b.WriteString(": " + strings.Join(held, " "))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// identity names the block of engine hash h with identity seq at depth:
// its tree name, with the salt its identity was hashed with.
func (e *env) identity(h, seq uint64, depth uint32) string {
	name := e.blockName(h)
	if _, ok := e.tr.Engine[name]; !ok {
		return name
	}
	for _, salt := range append([]string{""}, e.salts...) {
		if s, d := e.tr.SaltedSeq(name, salt); s == seq && d == depth {
			return salted(name, salt)
		}
	}
	return name + "?"
}

// local names the block of engine hash h whose local hash is l.
func (e *env) local(h, l uint64) string {
	name := e.blockName(h)
	if _, ok := e.tr.Engine[name]; !ok {
		return name
	}
	for _, salt := range append([]string{""}, e.salts...) {
		if kvhash.LocalHashes(e.tr.Tokens[name], e.tr.BlockSize, kvhash.SeedFor("", salt))[0] == l {
			return salted(name, salt)
		}
	}
	return name + "?"
}

func (e *env) blockName(h uint64) string {
	for n, x := range e.tr.Engine {
		if x == h {
			return n
		}
	}
	return fmt.Sprintf("%#x", h)
}

func salted(name, salt string) string {
	if salt == "" {
		return name
	}
	return name + "/" + salt
}

// recorder is the suite's Output: it logs every call and keeps the
// sources in an index, which refuses what an index refuses.
type recorder struct {
	e     *env
	ix    *index.Index
	log   strings.Builder
	order []index.Source
	names map[index.Source]string
	ready map[index.Source]bool
	fail  bool // refuse the next Apply
}

var (
	_ Output     = (*recorder)(nil)
	_ Identifier = (*recorder)(nil)
)

func (r *recorder) Ident(s index.Source, e uint64) (uint64, uint32, bool) { return r.ix.Ident(s, e) }

func (r *recorder) name(s index.Source, n string) {
	r.order = append(r.order, s)
	r.names[s] = n
}

func (r *recorder) Apply(s index.Source, ops []index.Op) error {
	words := make([]string, len(ops))
	for i, op := range ops {
		words[i] = r.op(op)
	}
	fmt.Fprintf(&r.log, "apply %s: %s", r.names[s], strings.Join(words, ", "))
	err := r.ix.Apply(s, ops...)
	if r.fail {
		r.fail, err = false, errors.New("the output failed")
	}
	var oe *index.OpError
	switch {
	case errors.As(err, &oe) && errors.Is(err, index.ErrUnknownParent):
		fmt.Fprintf(&r.log, " -> refused op %d: unknown parent", oe.Pos)
	case err != nil:
		fmt.Fprintf(&r.log, " -> refused: %v", err)
	}
	r.log.WriteString("\n")
	return err
}

func (r *recorder) op(op index.Op) string {
	switch op.Kind {
	case index.OpStore:
		var b strings.Builder
		fmt.Fprintf(&b, "store@%d ", op.Tier)
		if op.Seqs != nil {
			b.WriteString("ids:")
			for i, h := range op.Hashes {
				b.WriteString(" " + r.e.identity(h, op.Seqs[i], op.Depths[i]))
			}
			return b.String()
		}
		if op.HasParent {
			fmt.Fprintf(&b, "under %s: ", r.e.blockName(op.Parent))
		}
		for i, h := range op.Hashes {
			if i > 0 {
				b.WriteString(" ")
			}
			b.WriteString(r.e.local(h, op.Local[i]))
		}
		return b.String()
	case index.OpRemove:
		names := make([]string, len(op.Hashes))
		for i, h := range op.Hashes {
			names[i] = r.e.blockName(h)
		}
		return fmt.Sprintf("remove@%d %s", op.Tier, strings.Join(names, " "))
	case index.OpClear:
		if op.AllTiers {
			return "clear"
		}
		return fmt.Sprintf("clear@%d", op.Tier)
	}
	return fmt.Sprintf("op kind %d", op.Kind)
}

func (r *recorder) Reset(s index.Source) {
	fmt.Fprintf(&r.log, "reset %s\n", r.names[s])
	r.ix.RemoveSource(s)
}

func (r *recorder) Ready(s index.Source, ready bool) {
	if r.ready[s] == ready {
		r.e.t.Errorf("the core told %s ready=%v twice", r.names[s], ready)
	}
	r.ready[s] = ready
	word := "ready"
	if !ready {
		word = "not-ready"
	}
	fmt.Fprintf(&r.log, "%s %s\n", word, r.names[s])
}

func (r *recorder) Count(reason Reason) {
	class := [...]string{ClassReject: "reject", ClassDrop: "drop", ClassReset: "reset"}[reason.Class()]
	fmt.Fprintf(&r.log, "count %s %s\n", class, reason)
}
