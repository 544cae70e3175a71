// This file holds Fetch: a hint's missing blocks pulled from a peer over a Transport.

package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Transport pulls blocks from a peer runner. TCPTransport is one; an RDMA
// transport would be another.
type Transport interface {
	// Pull asks source for keys and hands each block it receives to rx:
	// Buffer for memory to receive into, then Commit once the bytes match
	// their checksum or Abort otherwise; Missing for keys the source does
	// not hold. Pull must stop soon after ctx is done, must not touch any
	// buffer after it returns, and must not commit unverified bytes.
	Pull(ctx context.Context, source string, keys []uint64, rx Receiver) error
	// Close releases idle connections.
	Close() error
}

// Receiver takes the blocks of one Pull. A transport may call it from more
// than one goroutine (TCPTransport verifies checksums on a second one), so
// implementations must be safe for concurrent use; the runner's are.
type Receiver interface {
	// Buffer returns the memory to receive key's block into, or nil when
	// the block is no longer wanted (the transport then discards it).
	Buffer(key uint64) []byte
	// Commit: the buffer for key holds the block, and its xxh3 is sum.
	Commit(key uint64, sum uint64)
	// Abort: the buffer for key holds nothing valid.
	Abort(key uint64)
	// Missing: the source does not hold key.
	Missing(key uint64)
}

// FetchResult splits the keys asked of Fetch, in their order.
type FetchResult struct {
	// Local keys are held locally now (read them with Read).
	Local []uint64
	// Missing keys are not: not in the hint, not held by the peer, or the
	// transfer failed. Recompute them; the runner will not ask the peer for
	// them again for this request.
	Missing []uint64
}

// Fetch pulls the keys of requestID's hint that are not held locally from
// the hinted peer, and reports which of keys are local afterwards. Keys
// another transfer is pulling or writing are waited for, not pulled twice;
// those it fails to bring are then asked of this request's own peer. The
// keys held locally, and those committed for this Fetch, stay pinned until
// it returns, so that making room for a pulled block never evicts another
// block of the same request. Fetch returns by the operation deadline
// (Config.OperationTimeout, or ctx's if earlier) with what has been
// committed by then; anything arriving later is dropped, never committed.
// The error explains missing keys when the transfer failed (a wrapped
// ErrProtocol, ErrChecksum, ErrAuth, context.DeadlineExceeded, a network
// error...); the result is valid either way.
func (r *Runner) Fetch(ctx context.Context, requestID string, keys []uint64) (FetchResult, error) {
	start := time.Now()
	opCtx, cancel := context.WithTimeout(ctx, r.cfg.OperationTimeout)
	defer cancel()

	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return FetchResult{Missing: append([]uint64(nil), keys...)}, ErrClosed
	}
	r.fetches++
	h := r.hints[requestID]
	var err error
	switch {
	case h == nil || h.conflict:
		err = fmt.Errorf("request %q: %w", requestID, ErrNoHint)
		h = nil
	case r.cfg.Transport == nil:
		err = ErrNoTransport
	}
	var pins []int
	for _, k := range keys {
		if slot, ok := r.pool.Pin(k); ok {
			pins = append(pins, slot)
		}
	}
	op, waits := r.planLocked(keys, h)
	r.mu.Unlock()

	var ops []*fetchOp
	for round := 0; ; round++ {
		if op != nil {
			ops = append(ops, op)
			if e := r.await(opCtx, op, start); err == nil {
				err = e
			}
		}
		for _, ch := range waits {
			select {
			case <-ch:
			case <-opCtx.Done():
				if err == nil {
					err = fmt.Errorf("waiting for blocks another transfer is writing: %w", opCtx.Err())
				}
			}
			if opCtx.Err() != nil {
				break
			}
		}
		// Another transfer this Fetch waited for may have failed for keys
		// this request's peer holds: ask it for them, once.
		if round > 0 || len(waits) == 0 || h == nil || opCtx.Err() != nil {
			break
		}
		r.mu.Lock()
		if op != nil {
			r.giveUpLocked(op.keys, h) // its own peer was asked already
		}
		op, waits = r.planLocked(keys, h)
		r.mu.Unlock()
	}
	r.mu.Lock()
	res := r.result(keys, h)
	r.fetchMisses += uint64(len(res.Missing))
	for _, slot := range pins {
		r.pool.Unpin(slot)
	}
	for _, op := range ops {
		op.unpinLocked()
	}
	r.unlock()
	return res, err
}

// planLocked starts no transfer but prepares one: it claims for a new op
// the keys of h that are neither local, nor being written or pulled, nor
// given up, and returns what to wait for among the others.
func (r *Runner) planLocked(keys []uint64, h *hintState) (op *fetchOp, waits []chan struct{}) {
	for _, k := range keys {
		switch r.pool.Peek(k) {
		case Present:
			continue
		case Pending:
			ch, ok := r.waiters[k]
			if !ok {
				ch = make(chan struct{})
				r.waiters[k] = ch
			}
			waits = append(waits, ch)
			continue
		}
		if other, ok := r.inflight[k]; ok {
			if other != op && !slices.Contains(waits, other.done) {
				waits = append(waits, other.done)
			}
			continue
		}
		if h == nil || r.cfg.Transport == nil {
			continue
		}
		if gaveUp, ok := h.keys[k]; ok && !gaveUp {
			if op == nil {
				op = &fetchOp{r: r, source: h.source, keys: make([]uint64, 0, len(keys)), slots: make(map[uint64]int, len(keys)), done: make(chan struct{})}
			}
			op.keys = append(op.keys, k)
			op.slots[k] = slotWanted
			r.inflight[k] = op
		}
	}
	if op != nil {
		r.transfers++
		r.wg.Add(1)
	}
	return op, waits
}

// await runs op and waits for it until ctx is done; past that the op is
// expired (it commits nothing more) and left to stop on its own.
func (r *Runner) await(ctx context.Context, op *fetchOp, start time.Time) error {
	go op.run(ctx)
	var err error
	select {
	case <-op.done:
		err = op.err
	case <-ctx.Done():
		err = ctx.Err()
		r.mu.Lock()
		if op.finished {
			err = op.err
		} else {
			op.expired = true
			op.abandon = time.AfterFunc(r.cfg.AbandonTimeout-time.Since(start), op.abandoned)
		}
		r.mu.Unlock()
	}
	if err != nil {
		err = fmt.Errorf("fetch %d blocks from %s: %w", len(op.keys), op.source, err)
	}
	return err
}

// giveUpLocked marks the keys of h that are not local given up.
func (r *Runner) giveUpLocked(keys []uint64, h *hintState) {
	if h == nil {
		return
	}
	for _, k := range keys {
		if _, ok := h.keys[k]; ok && r.pool.Peek(k) != Present {
			h.keys[k] = true
		}
	}
}

// result classifies keys by what the pool holds now and, for the missing
// ones, marks h given up. Called with r.mu held (or before any state exists).
func (r *Runner) result(keys []uint64, h *hintState) FetchResult {
	res := FetchResult{Local: make([]uint64, 0, len(keys))}
	for _, k := range keys {
		if r.pool.Peek(k) == Present {
			res.Local = append(res.Local, k)
		} else {
			res.Missing = append(res.Missing, k)
		}
	}
	r.giveUpLocked(res.Missing, h)
	return res
}

// Per-key progress of a fetchOp; values >= 0 are reserved slots.
const (
	slotWanted  = -1
	slotSettled = -2
)

// fetchOp is one transfer: the Receiver its Pull writes into.
type fetchOp struct {
	r      *Runner
	source string
	keys   []uint64
	done   chan struct{}

	// Guarded by r.mu.
	slots    map[uint64]int
	pins     []int // committed slots pinned for the Fetch, which unpins them
	expired  bool  // the Fetch has returned: commit nothing more
	finished bool
	err      error
	abandon  *time.Timer
}

var _ Receiver = (*fetchOp)(nil)

// unpinLocked drops the pins of the blocks op committed, which kept them
// for its Fetch.
func (op *fetchOp) unpinLocked() {
	for _, slot := range op.pins {
		op.r.pool.Unpin(slot)
	}
	op.pins = nil
}

func (op *fetchOp) run(ctx context.Context) {
	defer op.r.wg.Done()
	op.finish(op.r.cfg.Transport.Pull(ctx, op.source, op.keys, op))
}

// finish settles the op once its Pull has returned.
func (op *fetchOp) finish(err error) {
	r := op.r
	r.mu.Lock()
	// Pull has returned, so nothing writes the reserved slots any more.
	for k, s := range op.slots {
		if s >= 0 {
			r.pool.Abort(s)
			r.resolveLocked(k)
			op.slots[k] = slotSettled
			if err == nil {
				err = fmt.Errorf("%w: transport returned with block %#x unfinished", ErrProtocol, k)
			}
		}
	}
	for _, k := range op.keys {
		if r.inflight[k] == op {
			delete(r.inflight, k)
		}
	}
	op.finished, op.err = true, err
	r.transfers--
	if op.abandon != nil {
		op.abandon.Stop()
	}
	close(op.done)
	r.unlock()
	if err != nil && !errors.Is(err, context.Canceled) {
		r.log.Debug("transfer ended", "source", op.source, "blocks", len(op.keys), "err", err)
	}
}

func (op *fetchOp) abandoned() {
	r := op.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if op.finished {
		return
	}
	r.abandoned++
	r.log.Warn("transfer abandoned: still running past the abandon timeout; its slots stay reserved until it stops",
		"source", op.source, "blocks", len(op.keys), "abandon_timeout", r.cfg.AbandonTimeout)
}

func (op *fetchOp) Buffer(key uint64) []byte {
	r := op.r
	r.mu.Lock()
	if s, ok := op.slots[key]; op.expired || !ok || s != slotWanted {
		r.mu.Unlock()
		return nil
	}
	res, err := r.pool.Reserve(key)
	if err != nil {
		// Held or being written by someone else, or no room: not ours to take.
		op.slots[key] = slotSettled
		r.unlock()
		return nil
	}
	op.slots[key] = res.Slot
	if res.HasEvicted {
		r.queueKeyLocked(res.Evicted, true)
	}
	r.unlock()
	return r.pool.Buffer(res.Slot)
}

func (op *fetchOp) Commit(key uint64, sum uint64) {
	r := op.r
	r.mu.Lock()
	s, ok := op.slots[key]
	if !ok || s < 0 {
		r.mu.Unlock()
		return
	}
	op.slots[key] = slotSettled
	if op.expired {
		// Too late: the caller was told this key is missing.
		r.pool.Abort(s)
	} else {
		r.pool.Commit(s, sum, true, true)
		op.pins = append(op.pins, s)
		r.fetched++
		r.queueKeyLocked(key, false)
	}
	r.resolveLocked(key)
	r.unlock()
}

func (op *fetchOp) Abort(key uint64) {
	r := op.r
	r.mu.Lock()
	if s, ok := op.slots[key]; ok && s >= 0 {
		r.pool.Abort(s)
		r.resolveLocked(key)
		op.slots[key] = slotSettled
	}
	r.unlock()
}

func (op *fetchOp) Missing(key uint64) {
	r := op.r
	r.mu.Lock()
	if s, ok := op.slots[key]; ok && s == slotWanted {
		op.slots[key] = slotSettled
	}
	r.mu.Unlock()
}
