package runner

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/zeebo/xxh3"
)

// deafTransport is a transport that ignores cancellation, as a hardware
// transport might: it reserves buffers for every key, and only when
// released writes them and commits (or, with forget set, returns leaving
// them reserved). It exercises the runner's side of the Transport contract,
// which TCPTransport, always interruptible, cannot.
type deafTransport struct {
	started, release chan struct{}
	forget           bool
}

func (d *deafTransport) Pull(_ context.Context, _ string, keys []uint64, rx Receiver) error {
	bufs := make([][]byte, len(keys))
	for i, k := range keys {
		bufs[i] = rx.Buffer(k)
	}
	close(d.started)
	<-d.release
	if d.forget {
		return nil
	}
	for i, k := range keys {
		if bufs[i] == nil {
			continue
		}
		copy(bufs[i], block(k))
		rx.Commit(k, xxh3.Hash(bufs[i]))
	}
	return nil
}

func (d *deafTransport) Close() error { return nil }

func TestLateCompletionAndAbandon(t *testing.T) {
	tr := &deafTransport{started: make(chan struct{}), release: make(chan struct{})}
	rec := &recorder{}
	r := newTestRunner(t, Config{
		Capacity: 2, Transport: tr, Sink: rec, Logger: slog.New(slog.DiscardHandler),
		OperationTimeout: 20 * time.Millisecond, AbandonTimeout: 40 * time.Millisecond,
	})
	r.SubmitHint("req", Hint{Source: "tcp://peer:1", Keys: []uint64{1, 2}})
	res, err := r.Fetch(context.Background(), "req", []uint64{1, 2})
	if !errors.Is(err, context.DeadlineExceeded) || len(res.Local) != 0 || len(res.Missing) != 2 {
		t.Fatalf("fetch: %+v %v, want both missing by deadline", res, err)
	}
	<-tr.started
	// The transfer may still write both slots: neither may be reused.
	if st := r.Stats(); st.Pending != 2 || st.Transfers != 1 {
		t.Fatalf("stats while the transfer runs: %+v", st)
	}
	if _, err := r.Deposit(3, block(3), DepositOptions{}); !errors.Is(err, ErrFull) {
		t.Fatalf("deposit while the transfer holds every slot: %v, want ErrFull", err)
	}
	waitFor(t, "the abandon timeout", func() bool { return r.Stats().Abandoned == 1 })
	close(tr.release)
	r.Close() // waits for the transfer to stop
	st := r.Stats()
	if st.Pending != 0 || st.Free != 2 || st.FetchedBlocks != 0 || st.Transfers != 0 {
		t.Fatalf("stats after the late completion: %+v", st)
	}
	if got := states(r.Query([]uint64{1, 2}, "req")); !slices.Equal(got, []State{Miss, Miss}) {
		t.Fatalf("late blocks became visible or fetchable: %v", got)
	}
	if evs := rec.events(); len(evs) != 0 {
		t.Fatalf("inventory for late blocks: %+v", evs)
	}
	if _, err := r.Deposit(3, block(3), DepositOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestTransportLeavesBuffersReserved(t *testing.T) {
	tr := &deafTransport{started: make(chan struct{}), release: make(chan struct{}), forget: true}
	close(tr.release)
	r := newTestRunner(t, Config{Capacity: 2, Transport: tr})
	r.SubmitHint("req", Hint{Source: "tcp://peer:1", Keys: []uint64{1}})
	res, err := r.Fetch(context.Background(), "req", []uint64{1})
	if !errors.Is(err, ErrProtocol) || len(res.Missing) != 1 {
		t.Fatalf("fetch: %+v %v", res, err)
	}
	if st := r.Stats(); st.Pending != 0 || st.Free != 2 {
		t.Fatalf("reservations leaked: %+v", st)
	}
}
