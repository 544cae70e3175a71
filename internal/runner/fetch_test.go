package runner

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/zeebo/xxh3"
)

// perSourceTransport serves each source's own keys; a gated source answers
// only once its gate is closed.
type perSourceTransport struct {
	mu    sync.Mutex
	holds map[string]map[uint64]bool
	gates map[string]chan struct{}
	asked map[string][]uint64
}

func (p *perSourceTransport) Pull(ctx context.Context, src string, keys []uint64, rx Receiver) error {
	p.mu.Lock()
	p.asked[src] = append(p.asked[src], keys...)
	g := p.gates[src]
	p.mu.Unlock()
	if g != nil {
		select {
		case <-g:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for _, k := range keys {
		if !p.holds[src][k] {
			rx.Missing(k)
			continue
		}
		buf := rx.Buffer(k)
		if buf == nil {
			continue
		}
		copy(buf, block(k))
		rx.Commit(k, xxh3.Hash(buf))
	}
	return nil
}
func (p *perSourceTransport) Close() error { return nil }

// TestFetchAsksOwnPeerAfterOthersFail: request B's Fetch waits for request
// A's transfer of key 7 from a peer that lacks it; B's own peer holds 7, so
// B asks it then rather than give 7 up.
func TestFetchAsksOwnPeerAfterOthersFail(t *testing.T) {
	tr := &perSourceTransport{
		holds: map[string]map[uint64]bool{"tcp://x:1": {}, "tcp://y:1": {7: true}},
		gates: map[string]chan struct{}{"tcp://x:1": make(chan struct{})},
		asked: map[string][]uint64{},
	}
	r := newTestRunner(t, Config{Capacity: 4, Transport: tr, OperationTimeout: 2 * time.Second, AbandonTimeout: 3 * time.Second})
	r.SubmitHint("A", Hint{Source: "tcp://x:1", Keys: []uint64{7}})
	r.SubmitHint("B", Hint{Source: "tcp://y:1", Keys: []uint64{7}})
	go r.Fetch(context.Background(), "A", []uint64{7})
	waitFor(t, "A's transfer", func() bool { return r.Query([]uint64{7}, "B")[0].State == Fetching })
	done := make(chan FetchResult)
	go func() { res, _ := r.Fetch(context.Background(), "B", []uint64{7}); done <- res }()
	waitFor(t, "B waiting for A's transfer", func() bool { return r.Stats().Fetches == 2 })
	close(tr.gates["tcp://x:1"])
	res := <-done
	tr.mu.Lock()
	askedY := slices.Clone(tr.asked["tcp://y:1"])
	tr.mu.Unlock()
	if len(res.Local) != 1 || !slices.Equal(askedY, []uint64{7}) {
		t.Fatalf("B's fetch: %+v, its peer asked for %v; want 7 local, asked once", res, askedY)
	}
}

// TestFetchKeepsOwnBlocks: room for the pulled blocks is not made by
// evicting the request's own local block (a hole at the root would waste
// the pull too), nor a block the same Fetch pulled before.
func TestFetchKeepsOwnBlocks(t *testing.T) {
	tr := &perSourceTransport{
		holds: map[string]map[uint64]bool{"tcp://y:1": {2: true, 3: true}},
		gates: map[string]chan struct{}{}, asked: map[string][]uint64{},
	}
	r := newTestRunner(t, Config{Capacity: 2, Transport: tr})
	r.Deposit(1, block(1), DepositOptions{})
	r.SubmitHint("R", Hint{Source: "tcp://y:1", Keys: []uint64{2, 3}})
	res, err := r.Fetch(context.Background(), "R", []uint64{1, 2, 3})
	if !slices.Equal(res.Local, []uint64{1, 2}) || !slices.Equal(res.Missing, []uint64{3}) || err != nil {
		t.Fatalf("Fetch of [1 2 3] with 1 local, 2 slots: %+v, %v; want 1 and 2 local, 3 missing", res, err)
	}
}
