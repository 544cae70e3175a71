package mocker

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"kvrouter/internal/hints"
	"kvrouter/internal/kvhash"
	"kvrouter/internal/runner"
)

// sglangHint is the kv_hints envelope a router would attach: A's control
// endpoint and A's engine block hashes of the prompt.
func sglangHint(t testing.TB, endpoint string, tokens []uint32, blockSize int, salt string) json.RawMessage {
	t.Helper()
	return envelopeFor(endpoint, kvhash.SGLangPageHashes(tokens, blockSize, salt))
}

func envelopeFor(endpoint string, keys []uint64) json.RawMessage {
	return hints.AppendEnvelope(nil, "test-message", hints.Hint{Endpoint: endpoint, BlockHashes: keys})
}

func peerBody(prompt string, hint json.RawMessage) map[string]any {
	b := map[string]any{"prompt": prompt, "max_tokens": 24}
	if hint != nil {
		b["kv_hints"] = hint
	}
	return b
}

// TestPeerRestore is the acceptance path: a long prompt runs on A; B, told
// by a hint where A's blocks are, pulls them over TCP, restores them, and
// answers exactly as A did; once A has evicted them, a fresh B restores
// nothing and still answers the same by recomputing.
func TestPeerRestore(t *testing.T) {
	a := startEngine(t, nil)
	b := startEngine(t, nil)
	prompt := longPrompt(t, a, "peer", 2000)
	tokens := tokenize(t, a, prompt)
	if len(tokens) < 2000 {
		t.Fatalf("prompt has %d tokens", len(tokens))
	}
	full := len(tokens) / 64 * 64
	hint := sglangHint(t, a.ControlEndpoint(0), tokens, 64, "")

	onA := complete(t, a, peerBody(prompt, nil))
	if onA.Usage.PromptTokens != len(tokens) || onA.Usage.Details.CachedTokens != 0 || onA.Usage.KVRouter.SourceEndpoint != nil {
		t.Fatalf("cold run on A: %+v", onA.Usage)
	}

	onB := complete(t, b, peerBody(prompt, hint))
	u := onB.Usage
	if u.KVRouter.PeerRestoredTokens < 1984 || u.KVRouter.PeerRestoredTokens != full {
		t.Fatalf("B restored %d tokens from A, want %d", u.KVRouter.PeerRestoredTokens, full)
	}
	if u.KVRouter.SourceEndpoint == nil || *u.KVRouter.SourceEndpoint != a.ControlEndpoint(0) {
		t.Fatalf("source endpoint %v, want %s", u.KVRouter.SourceEndpoint, a.ControlEndpoint(0))
	}
	if u.Details.CachedTokens != full || u.KVRouter.LocalCachedTokens != 0 {
		t.Fatalf("cached %d local %d", u.Details.CachedTokens, u.KVRouter.LocalCachedTokens)
	}
	if onB.text() != onA.text() || onB.text() == "" {
		t.Fatalf("B answered %q, A %q", onB.text(), onA.text())
	}

	// A second request on B finds the blocks in its own GPU cache.
	again := complete(t, b, peerBody(prompt, hint))
	if again.Usage.KVRouter.PeerRestoredTokens != 0 || again.Usage.KVRouter.LocalCachedTokens != full || again.text() != onA.text() {
		t.Fatalf("repeat on B: %+v %q", again.Usage, again.text())
	}

	var ev evictResponse
	if code := post(t, a.URL()+pathAdminEvict, map[string]any{"tier": "all", "prompt": prompt}, &ev); code != http.StatusOK {
		t.Fatalf("evict: status %d", code)
	}
	if ev.GPU != full/64 || ev.Runner != full/64 {
		t.Fatalf("evicted %+v, want %d blocks from each tier", ev, full/64)
	}
	fresh := startEngine(t, nil)
	after := complete(t, fresh, peerBody(prompt, hint))
	if after.Usage.KVRouter.PeerRestoredTokens != 0 || after.Usage.KVRouter.SourceEndpoint != nil {
		t.Fatalf("restored %d tokens from an evicted peer", after.Usage.KVRouter.PeerRestoredTokens)
	}
	if after.text() != onA.text() {
		t.Fatalf("recomputed answer %q differs from %q", after.text(), onA.text())
	}
	assertMetric(t, fresh, metricHintOutcomes+`{outcome="failed"} 1`)
	assertMetric(t, b, metricPeerTokens+`{dp_rank="0"} `+itoa(full))
	// A served B's pull well within its runner server's fetch deadline.
	assertMetric(t, a, metricRunnerExpired+`{dp_rank="0",tp_rank="0"} 0`)
	assertMetric(t, a, metricRunnerRefused+`{dp_rank="0",reason="client_limit",tp_rank="0"} 0`)
	assertMetric(t, a, metricRunnerRefused+`{dp_rank="0",reason="full",tp_rank="0"} 0`)
}

// TestRunnerRefusalsVisible: connections to a runner's peer port beyond one
// client's share are refused, and the refusals show on /metrics.
func TestRunnerRefusalsVisible(t *testing.T) {
	e := startEngine(t, nil)
	addr := strings.TrimPrefix(e.ControlEndpoint(0), "tcp://")
	share := runner.DefaultMaxConns / 4
	const extra = 3
	// HELLO (a zero nonce) and an empty AUTH, the runner protocol's
	// handshake without a secret: admitted connections are then
	// authenticated and idle, holding their slots for the idle timeout.
	handshake := append([]byte{'K', 'R', 1, 1, 0, 0, 0, 16}, make([]byte, 16)...)
	handshake = append(handshake, 'K', 'R', 1, 3, 0, 0, 0, 0)
	for range share + extra {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.Write(handshake)
	}
	want := metricRunnerRefused + `{dp_rank="0",reason="client_limit",tp_rank="0"} ` + strconv.Itoa(extra)
	for i := 0; !strings.Contains(metricsText(t, e), want+"\n"); i++ {
		if i == 1000 {
			t.Fatalf("metrics never showed %q:\n%s", want, metricsText(t, e))
		}
		time.Sleep(5 * time.Millisecond)
	}
	assertMetric(t, e, metricRunnerConns+`{dp_rank="0",tp_rank="0"} `+strconv.Itoa(share))
}

// TestPeerBytesDecideOutput: a peer whose model seed differs holds other
// bytes for the same blocks; restoring them changes the answer, which
// proves the output depends on the bytes actually restored.
func TestPeerBytesDecideOutput(t *testing.T) {
	a := startEngine(t, func(c *Config) { c.ModelSeed = 1 })
	b := startEngine(t, func(c *Config) { c.ModelSeed = 2 })
	prompt := longPrompt(t, a, "seeds", 300)
	tokens := tokenize(t, a, prompt)
	onA := complete(t, a, peerBody(prompt, nil))

	own := startEngine(t, func(c *Config) { c.ModelSeed = 2 })
	onOwn := complete(t, own, peerBody(prompt, nil))
	if onOwn.text() == onA.text() {
		t.Fatal("different model seeds gave the same answer")
	}
	onB := complete(t, b, peerBody(prompt, sglangHint(t, a.ControlEndpoint(0), tokens, 64, "")))
	if onB.Usage.KVRouter.PeerRestoredTokens != len(tokens)/64*64 {
		t.Fatalf("restored %d tokens", onB.Usage.KVRouter.PeerRestoredTokens)
	}
	if onB.text() != onA.text() || onB.text() == onOwn.text() {
		t.Fatalf("with A's bytes B answered %q; A %q, B's own weights %q", onB.text(), onA.text(), onOwn.text())
	}
}

// TestPeerSaltIsolation: a hint built for another cache salt names blocks
// the request does not have, so nothing is pulled.
func TestPeerSaltIsolation(t *testing.T) {
	a := startEngine(t, nil)
	b := startEngine(t, nil)
	prompt := longPrompt(t, a, "salt", 300)
	tokens := tokenize(t, a, prompt)
	body := peerBody(prompt, nil)
	body["cache_salt"] = "tenant-a"
	complete(t, a, body)

	body["cache_salt"] = "tenant-b"
	body["kv_hints"] = sglangHint(t, a.ControlEndpoint(0), tokens, 64, "tenant-a")
	if got := complete(t, b, body); got.Usage.KVRouter.PeerRestoredTokens != 0 {
		t.Fatalf("pulled %d tokens across salts", got.Usage.KVRouter.PeerRestoredTokens)
	}
	body["cache_salt"] = "tenant-a"
	body["kv_hints"] = sglangHint(t, a.ControlEndpoint(0), tokens, 64, "tenant-a")
	if got := complete(t, b, body); got.Usage.KVRouter.PeerRestoredTokens != len(tokens)/64*64 {
		t.Fatalf("pulled %d tokens under the right salt", got.Usage.KVRouter.PeerRestoredTokens)
	}
}

// TestPeerTP2: TP rank t of the target pulls its shard from the source's TP
// rank t; the restore needs both.
func TestPeerTP2(t *testing.T) {
	tp2 := func(c *Config) { c.TP = 2 }
	a := startEngine(t, tp2)
	b := startEngine(t, tp2)
	prompt := longPrompt(t, a, "tp2", 1000)
	tokens := tokenize(t, a, prompt)
	full := len(tokens) / 64 * 64
	onA := complete(t, a, peerBody(prompt, nil))
	onB := complete(t, b, peerBody(prompt, sglangHint(t, a.ControlEndpoint(0), tokens, 64, "")))
	if onB.Usage.KVRouter.PeerRestoredTokens != full || onB.text() != onA.text() {
		t.Fatalf("TP2 restore: %d tokens, %q vs %q", onB.Usage.KVRouter.PeerRestoredTokens, onB.text(), onA.text())
	}
	// TP splits bytes, it does not change them: a TP1 engine agrees.
	one := startEngine(t, nil)
	if got := complete(t, one, peerBody(prompt, nil)); got.text() != onA.text() {
		t.Fatalf("TP1 answered %q, TP2 %q", got.text(), onA.text())
	}
	// With one shard of A gone, no block is whole: nothing is restored.
	if code := post(t, a.URL()+pathAdminReset, map[string]any{}, nil); code != http.StatusOK {
		t.Fatal(code)
	}
	complete(t, a, peerBody(prompt, nil))
	a.ranks[0].tier.runners[1].EvictAll()
	c := startEngine(t, tp2)
	got := complete(t, c, peerBody(prompt, sglangHint(t, a.ControlEndpoint(0), tokens, 64, "")))
	if got.Usage.KVRouter.PeerRestoredTokens != 0 || got.text() != onA.text() {
		t.Fatalf("half-held blocks restored %d tokens", got.Usage.KVRouter.PeerRestoredTokens)
	}
}

// TestPeerSecret: peers sharing --runner-secret pull; a target without it
// is refused by the source and recomputes, answering the same.
func TestPeerSecret(t *testing.T) {
	secret := func(c *Config) { c.RunnerSecret = "s3cret" }
	a := startEngine(t, secret)
	prompt := longPrompt(t, a, "secret", 300)
	tokens := tokenize(t, a, prompt)
	hint := sglangHint(t, a.ControlEndpoint(0), tokens, 64, "")
	onA := complete(t, a, peerBody(prompt, nil))
	cases := []struct {
		name     string
		mut      func(*Config)
		restored int
	}{
		{"shared secret", secret, len(tokens) / 64 * 64},
		{"no secret", nil, 0},
		{"other secret", func(c *Config) { c.RunnerSecret = "other" }, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := startEngine(t, c.mut)
			got := complete(t, b, peerBody(prompt, hint))
			if got.Usage.KVRouter.PeerRestoredTokens != c.restored || got.text() != onA.text() {
				t.Fatalf("restored %d tokens, want %d; %q vs %q", got.Usage.KVRouter.PeerRestoredTokens, c.restored, got.text(), onA.text())
			}
		})
	}
}

// metricValue is the value of the sample line that starts with name (and
// a space), or -1 when /metrics has none.
func metricValue(t testing.TB, e *Engine, name string) float64 {
	t.Helper()
	for _, l := range strings.Split(metricsText(t, e), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", l, err)
			}
			return f
		}
	}
	return -1
}

// TestPullSetup: a peer pull pays the simulated setup (divided by the
// speedup, in wall time) on top of its real transfer, the request sees it
// and the pull histogram counts it; the blocks still arrive and the answer
// is the source's.
func TestPullSetup(t *testing.T) {
	const setup, speedup = 40 * time.Second, 200 // 200 ms of wall time
	a := startEngine(t, func(c *Config) { c.Speedup = speedup })
	b := startEngine(t, func(c *Config) { c.Speedup, c.PullSetup = speedup, setup })
	prompt := longPrompt(t, a, "setup", 600)
	tokens := tokenize(t, a, prompt)
	onA := complete(t, a, peerBody(prompt, nil))

	start := time.Now()
	onB := complete(t, b, peerBody(prompt, sglangHint(t, a.ControlEndpoint(0), tokens, 64, "")))
	took := time.Since(start)
	wall := setup / speedup
	if got, want := onB.Usage.KVRouter.PeerRestoredTokens, len(tokens)/64*64; got != want {
		t.Fatalf("restored %d tokens, want %d", got, want)
	}
	if onB.text() != onA.text() {
		t.Fatalf("B answered %q, A %q", onB.text(), onA.text())
	}
	if took < wall {
		t.Fatalf("the hinted request took %v, less than the pull setup %v", took, wall)
	}
	if got := metricValue(t, b, metricPeerPull+"_sum"); got < wall.Seconds() {
		t.Fatalf("pull histogram sum %vs, want at least the setup %v", got, wall)
	}
	if got := metricValue(t, b, metricPeerPull+"_count"); got != 1 {
		t.Fatalf("pull histogram count %v, want 1", got)
	}
	// The source paid nothing: it pulled nothing.
	if got := metricValue(t, a, metricPeerPull+"_count"); got != 0 {
		t.Fatalf("source counted %v pulls", got)
	}
}

// TestPullSetupClock: the setup is waited out on the engine's clock, as
// exactly PullSetup / Speedup, before the request's first step; a request
// with nothing to pull (no hint) waits for no setup.
func TestPullSetupClock(t *testing.T) {
	a := startEngine(t, nil)
	clock := &stepClock{waits: make(chan wait)}
	b := startEngine(t, func(c *Config) {
		c.Clock, c.Speedup, c.PullSetup = clock, 4, 300*time.Millisecond
		c.PrefillPerToken, c.DecodePerToken, c.RestorePerToken = 100*time.Microsecond, 10*time.Millisecond, 0
	})
	prompt := longPrompt(t, a, "clock", 200)
	tokens := tokenize(t, a, prompt)
	complete(t, a, peerBody(prompt, nil))

	// finish lets every later wait elapse at once.
	finish := func(done <-chan completion) completion {
		for {
			select {
			case w := <-clock.waits:
				w.ch <- clock.Now()
			case c := <-done:
				return c
			}
		}
	}

	done := postAsync(t, b, peerBody(prompt, sglangHint(t, a.ControlEndpoint(0), tokens, 64, "")))
	w := <-clock.waits
	if want := 300 * time.Millisecond / 4; w.d != want {
		t.Fatalf("first wait %v, want the pull setup %v", w.d, want)
	}
	if got := metricValue(t, b, metricPeerPull+"_count"); got != 0 {
		t.Fatalf("pull counted (%v) before its setup elapsed", got)
	}
	w.ch <- clock.Now()
	if got := finish(done); got.Usage.KVRouter.PeerRestoredTokens != len(tokens)/64*64 {
		t.Fatalf("restored %d tokens", got.Usage.KVRouter.PeerRestoredTokens)
	}

	// Without a hint the first wait is the prefill step, not a setup.
	other := longPrompt(t, a, "no hint", 100)
	n := len(tokenize(t, b, other))
	done = postAsync(t, b, peerBody(other, nil))
	w = <-clock.waits
	if want := (10*time.Millisecond + time.Duration(n)*100*time.Microsecond) / 4; w.d != want {
		t.Fatalf("first wait %v, want the prefill step %v", w.d, want)
	}
	w.ch <- clock.Now()
	finish(done)
}

func TestPullSetupNegative(t *testing.T) {
	c := testConfig(t, func(c *Config) { c.PullSetup = -time.Millisecond })
	if _, err := Start(c); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "pull-setup-ms") {
		t.Fatalf("Start with a negative pull setup: %v", err)
	}
}

// TestPullReport: a hinted request's usage reports what its pull cost
// (blocks wanted and pulled, bytes, wall time with the setup); POST
// /admin/pull raises the setup at run time and the next pull reports it; a
// hint naming blocks outside the request's chain reports them as foreign.
func TestPullReport(t *testing.T) {
	const speedup = 100
	a := startEngine(t, func(c *Config) { c.Speedup = speedup })
	b := startEngine(t, func(c *Config) { c.Speedup, c.PullSetup = speedup, 2*time.Second }) // 20 ms of wall time
	for i, setupMS := range []float64{0, 30000} {                                            // the second: 300 ms of wall time
		if setupMS > 0 {
			var k pullKnobs
			post(t, b.URL()+pathAdminPull, map[string]any{"setup_ms": setupMS}, &k)
			if k.SetupMS == nil || *k.SetupMS != setupMS {
				t.Fatalf("POST %s answered %v, want %v", pathAdminPull, k.SetupMS, setupMS)
			}
		}
		prompt := longPrompt(t, a, "report"+itoa(i), 600)
		tokens := tokenize(t, a, prompt)
		complete(t, a, peerBody(prompt, nil))
		got := complete(t, b, peerBody(prompt, sglangHint(t, a.ControlEndpoint(0), tokens, 64, "")))
		p := got.Usage.KVRouter.Pull
		blocks := len(tokens) / 64
		if p == nil {
			t.Fatalf("setup %v ms: no pull report", setupMS)
		}
		wantWall := 0.02
		if setupMS > 0 {
			wantWall = setupMS / 1e3 / speedup
		}
		switch {
		case p.SourceEndpoint != a.ControlEndpoint(0) || p.WantedBlocks != blocks || p.PulledBlocks != blocks || p.Short:
			t.Errorf("setup %v ms: report %+v, want %d blocks from %s", setupMS, *p, blocks, a.ControlEndpoint(0))
		case p.PulledTokens != blocks*64 || p.Bytes != int64(blocks*64*DefaultKVBytesPerToken):
			t.Errorf("setup %v ms: %d tokens, %d bytes", setupMS, p.PulledTokens, p.Bytes)
		case p.Seconds < wantWall || p.Seconds > wantWall+2:
			t.Errorf("setup %v ms: pull took %vs, want a little over %vs", setupMS, p.Seconds, wantWall)
		case p.ForeignBlocks != 0:
			t.Errorf("setup %v ms: %d foreign blocks", setupMS, p.ForeignBlocks)
		}
	}
	prompt := longPrompt(t, a, "foreign", 600)
	tokens := tokenize(t, a, prompt)
	other := tokenize(t, a, longPrompt(t, a, "other", 600))
	hint := envelopeFor(a.ControlEndpoint(0), append(hashesOf(t, b, tokens)[:2], hashesOf(t, b, other)[:3]...))
	got := complete(t, b, peerBody(prompt, hint))
	if p := got.Usage.KVRouter.Pull; p == nil || p.ForeignBlocks != 3 {
		t.Fatalf("a hint with 3 blocks of another prompt reported %+v", p)
	}
	if code := post(t, b.URL()+pathAdminPull, map[string]any{"setup_ms": -1}, nil); code != http.StatusBadRequest {
		t.Fatalf("a negative setup answered %d", code)
	}
}

// hashesOf is e's engine block hashes of tokens, unsalted.
func hashesOf(t testing.TB, e *Engine, tokens []uint32) []uint64 {
	t.Helper()
	return e.cfg.engineHashes(tokens, "", "")
}
