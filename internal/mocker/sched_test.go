package mocker

import (
	"errors"
	"slices"
	"testing"
	"time"

	"kvrouter/internal/kvevents"
	"kvrouter/internal/runner"
	"kvrouter/internal/tokenizer"
)

const testBS = 64

var testVocab = newVocab(tokenizer.Default())

// testShards is a rank's runner without peers: real runners, no sockets.
func testShards(t testing.TB, tp, blocks int) *shards {
	t.Helper()
	s := &shards{shardBytes: testBS * DefaultKVBytesPerToken / tp}
	for range tp {
		r, err := runner.New(runner.Config{BlockBytes: s.shardBytes, Capacity: blocks})
		if err != nil {
			t.Fatal(err)
		}
		s.runners = append(s.runners, r)
	}
	t.Cleanup(s.close)
	return s
}

func testSched(budget, seqs, gpuBlocks int, lower *shards) *scheduler {
	cfg := schedConfig{
		BlockSize: testBS, MaxNumSeqs: seqs, MaxBatchedTokens: budget,
		PrefillPerToken: time.Microsecond, DecodePerToken: time.Millisecond, RestorePerToken: 100 * time.Nanosecond,
		ModelSeed: 7,
	}
	var l Lower // a nil *shards must stay a nil interface
	if lower != nil {
		l = lower
	}
	return newScheduler(cfg, gpuBlocks, testBS*DefaultKVBytesPerToken, l, testVocab)
}

// seqOf builds a sequence over tokens start, start+1, ... (n of them).
func seqOf(id string, start, n, maxTokens int) *Seq {
	tokens := make([]uint32, n)
	for i := range tokens {
		tokens[i] = uint32(start + i)
	}
	return seqTokens(id, tokens, maxTokens)
}

func seqTokens(id string, tokens []uint32, maxTokens int) *Seq {
	c := Config{Flavor: SGLang, BlockSize: testBS}
	return &Seq{ID: id, Tokens: tokens, Keys: c.engineHashes(tokens, "", ""), Seeds: contentSeeds(tokens, testBS, ""), MaxTokens: maxTokens}
}

// drain steps until every sequence is done and returns the steps taken.
func drain(t *testing.T, s *scheduler) []StepResult {
	t.Helper()
	var steps []StepResult
	for s.Busy() {
		if len(steps) > 10000 {
			t.Fatal("scheduler does not finish")
		}
		steps = append(steps, s.Step())
	}
	return steps
}

func run(t *testing.T, s *scheduler, seqs ...*Seq) []StepResult {
	t.Helper()
	for _, q := range seqs {
		if err := s.Add(q); err != nil {
			t.Fatal(err)
		}
	}
	return drain(t, s)
}

func TestSchedChunkedPrefill(t *testing.T) {
	cases := []struct {
		name      string
		prompt    int
		budget    int
		maxTokens int
		prefill   []int // prefill tokens per step
		decode    []int // decode tokens per step
	}{
		{"one step", 100, 1000, 3, []int{100, 0, 0}, []int{0, 1, 1}},
		{"three chunks", 250, 100, 2, []int{100, 100, 50, 0}, []int{0, 0, 0, 1}},
		{"exact budget", 128, 64, 1, []int{64, 64}, []int{0, 0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := testSched(c.budget, 8, 64, nil)
			steps := run(t, s, seqOf("a", 0, c.prompt, c.maxTokens))
			var prefill, decode []int
			for _, st := range steps {
				prefill = append(prefill, st.PrefillTokens)
				decode = append(decode, st.DecodeTokens)
				want := time.Millisecond + time.Duration(st.PrefillTokens)*time.Microsecond
				if st.Duration != want {
					t.Errorf("step duration %v, want %v", st.Duration, want)
				}
			}
			if !slices.Equal(prefill, c.prefill) || !slices.Equal(decode, c.decode) {
				t.Fatalf("prefill %v decode %v, want %v %v", prefill, decode, c.prefill, c.decode)
			}
		})
	}
}

// TestSchedStoredEvents: blocks completed by a chunk are reported as one
// coalesced BlockStored chained to the block before it.
func TestSchedStoredEvents(t *testing.T) {
	s := testSched(100, 8, 64, nil)
	q := seqOf("a", 0, 250, 1)
	steps := run(t, s, q)
	want := [][]uint64{{q.Keys[0]}, {q.Keys[1], q.Keys[2]}, nil}
	for i, st := range steps {
		var got []uint64
		for _, ev := range st.Events {
			if ev.Kind != kvevents.KindStored {
				t.Fatalf("step %d: unexpected %v", i, ev.Kind)
			}
			first := slices.Index(q.Keys, ev.BlockHashes[0])
			if first > 0 && (!ev.HasParent || ev.ParentHash != q.Keys[first-1]) {
				t.Errorf("step %d: parent %x/%v, want %x", i, ev.ParentHash, ev.HasParent, q.Keys[first-1])
			}
			if !slices.Equal(ev.TokenIDs, q.Tokens[first*testBS:(first+len(ev.BlockHashes))*testBS]) || ev.BlockSize != testBS {
				t.Errorf("step %d: token ids or block size wrong", i)
			}
			got = append(got, ev.BlockHashes...)
		}
		if !slices.Equal(got, want[i]) {
			t.Fatalf("step %d stored %x, want %x", i, got, want[i])
		}
	}
}

// TestSchedCacheSources: where a prompt's KV comes from, and that the output
// is a function of the bytes the GPU holds, whatever their source.
func TestSchedCacheSources(t *testing.T) {
	lower := testShards(t, 2, 64)
	s := testSched(4096, 8, 16, lower)
	const prompt = 64*4 + 10
	first := seqOf("a", 0, prompt, 4)
	run(t, s, first)
	if first.GPUTokens+first.RunnerTokens+first.PeerTokens != 0 {
		t.Fatalf("cold request found cached tokens")
	}
	for i, k := range first.Keys {
		if !lower.Holds(k) {
			t.Fatalf("block %d not written through to the runner", i)
		}
	}
	type want struct{ gpu, runner int }
	cases := []struct {
		name    string
		prepare func()
		want    want
		same    bool // output equals the cold request's
	}{
		{"gpu prefix cache", func() {}, want{4 * testBS, 0}, true},
		{"runner restore after gpu eviction", func() { s.Evict(nil) }, want{0, 4 * testBS}, true},
		{"recompute after both evicted", func() { s.Evict(nil); lower.evict(nil) }, want{0, 0}, true},
		{"other bytes in the runner change the output", func() {
			s.Evict(nil)
			lower.evict(nil)
			other := make([]byte, testBS*DefaultKVBytesPerToken)
			for i, k := range first.Keys {
				fillBlock(other, 8, first.Seeds[i]) // another model seed
				lower.Store(k, other)
			}
		}, want{0, 4 * testBS}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.prepare()
			q := seqOf("b", 0, prompt, 4)
			steps := run(t, s, q)
			if got := (want{q.GPUTokens, q.RunnerTokens}); got != c.want {
				t.Fatalf("cached tokens %+v, want %+v", got, c.want)
			}
			if c.want.runner > 0 && steps[0].RestoredTokens != c.want.runner {
				t.Errorf("restored %d tokens in the first step, want %d", steps[0].RestoredTokens, c.want.runner)
			}
			if got := slices.Equal(q.Output, first.Output); got != c.same {
				t.Fatalf("output equal to the cold one: %v, want %v", got, c.same)
			}
		})
	}
}

// TestSchedLastTokenComputed: a fully cached prompt still computes its last
// token, so a prompt of whole blocks reuses all but its last block.
func TestSchedLastTokenComputed(t *testing.T) {
	s := testSched(4096, 8, 16, nil)
	run(t, s, seqOf("a", 0, 3*testBS, 1))
	q := seqOf("b", 0, 3*testBS, 1)
	steps := run(t, s, q)
	if q.GPUTokens != 2*testBS || steps[0].PrefillTokens != testBS {
		t.Fatalf("gpu %d tokens, prefill %d; want %d and %d", q.GPUTokens, steps[0].PrefillTokens, 2*testBS, testBS)
	}
}

func TestSchedEvictsLRU(t *testing.T) {
	s := testSched(4096, 8, 6, nil)
	a := seqOf("a", 0, 2*testBS+1, 1) // 3 blocks, 2 cached after
	b := seqOf("b", 1000, 2*testBS+1, 1)
	run(t, s, a)
	run(t, s, b)
	c := seqOf("c", 2000, 3*testBS+1, 1) // needs 4: 2 free + evict 2
	steps := run(t, s, c)
	var removed []uint64
	for _, st := range steps {
		for _, ev := range st.Events {
			if ev.Kind == kvevents.KindRemoved {
				removed = append(removed, ev.BlockHashes...)
			}
		}
	}
	if !slices.Equal(removed, a.Keys) {
		t.Fatalf("evicted %x, want the least recently used %x", removed, a.Keys)
	}
}

func TestSchedAdmission(t *testing.T) {
	t.Run("max num seqs", func(t *testing.T) {
		s := testSched(4096, 2, 64, nil)
		for i := range 3 {
			if err := s.Add(seqOf(string(rune('a'+i)), i*1000, 10, 2)); err != nil {
				t.Fatal(err)
			}
		}
		st := s.Step()
		if len(st.Admitted) != 2 || s.Stats().Waiting != 1 {
			t.Fatalf("admitted %d, waiting %d", len(st.Admitted), s.Stats().Waiting)
		}
	})
	t.Run("too large", func(t *testing.T) {
		s := testSched(4096, 2, 4, nil)
		if err := s.Add(seqOf("a", 0, 4*testBS, 1)); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("got %v, want ErrTooLarge", err)
		}
	})
	t.Run("waits for blocks", func(t *testing.T) {
		s := testSched(4096, 8, 4, nil)
		a, b := seqOf("a", 0, 2*testBS, 50), seqOf("b", 5000, 2*testBS, 1)
		run(t, s, a, b)
		if a.Emitted != 50 || b.Emitted != 1 {
			t.Fatalf("emitted %d and %d", a.Emitted, b.Emitted)
		}
	})
	t.Run("abort frees blocks", func(t *testing.T) {
		s := testSched(4096, 8, 16, nil)
		q := seqOf("a", 0, 3*testBS, 100)
		if err := s.Add(q); err != nil {
			t.Fatal(err)
		}
		s.Step()
		if s.Stats().GPUUsed == 0 {
			t.Fatal("running sequence holds no blocks")
		}
		if !s.Abort(q) || s.Stats().GPUUsed != 0 || s.Busy() {
			t.Fatalf("after abort: used %d busy %v", s.Stats().GPUUsed, s.Busy())
		}
		if s.Abort(q) {
			t.Fatal("second abort found the sequence")
		}
	})
}

func tokenizerDecode(ids []uint32) string { return tokenizer.Default().Decode(ids) }
