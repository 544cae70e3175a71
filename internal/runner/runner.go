// Package runner is kvrouter's KV cache runner: a host-DRAM pool of
// fixed-size KV blocks keyed by engine block hash, which an engine deposits
// into and reads from, and which pulls blocks named by a router hint from a
// peer runner (destination-initiated, verified by checksum) over a Transport.
//
// The Pool is the pure core (no locks, goroutines or clocks); Runner wraps it
// as a thread-safe service; TCPTransport and Server move blocks between
// runners.
package runner

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"kvrouter/internal/kvevents"
)

// Defaults from docs/wire.md §7.2 (operation_timeout_ms, abandon_timeout_ms).
const (
	DefaultOperationTimeout = 1000 * time.Millisecond
	DefaultAbandonTimeout   = 5000 * time.Millisecond
	DefaultMaxHints         = 65536
)

// More sentinel errors.
var (
	// ErrBlockSize: a block's length differs from the configured block bytes.
	ErrBlockSize = errors.New("block size differs from block bytes")
	// ErrHint: a hint is malformed; the message names the field.
	ErrHint = errors.New("invalid hint")
	// ErrHintConflict: a second hint for a request names another source;
	// the request's hint is dropped (fail closed) until DiscardHint.
	ErrHintConflict = errors.New("conflicting hint for request")
	// ErrTooManyHints: MaxHints requests hold hints; discard some first.
	ErrTooManyHints = errors.New("too many outstanding hints")
	// ErrNoHint: Fetch for a request without a usable hint.
	ErrNoHint = errors.New("no hint for request")
	// ErrNoTransport: Fetch on a runner configured without a Transport.
	ErrNoTransport = errors.New("runner has no transport")
	// ErrClosed: the runner is closed.
	ErrClosed = errors.New("runner closed")
)

// Config configures a Runner.
type Config struct {
	// BlockBytes is the size of every block; Capacity the number of blocks
	// held (both required). BlockBytes × Capacity is allocated up front.
	BlockBytes int
	Capacity   int
	// Policy builds the eviction policy; nil is LRU.
	Policy func(slots int) Policy
	// LowWatermark: OnCapacityNeeded fires when free plus evictable slots
	// fall below it (0 disables); Stats().Low reports the same level.
	LowWatermark int
	// OnCapacityNeeded is called on each crossing below LowWatermark, from
	// the goroutine that crossed it, without the runner's lock held.
	OnCapacityNeeded func(PoolStats)
	// Sink receives inventory changes; nil drops them. See Sink for order.
	Sink Sink
	// Transport pulls blocks from peers; nil disables Fetch.
	Transport Transport
	// OperationTimeout bounds a Fetch (default 1000 ms): at the deadline the
	// caller gets what has arrived and the transfer is told to stop.
	OperationTimeout time.Duration
	// AbandonTimeout (default 5000 ms): a transfer still running this long
	// after its Fetch began is logged and counted as abandoned. Its slots
	// stay reserved until it really stops, because it may still write them.
	AbandonTimeout time.Duration
	// MaxHints bounds the requests holding hints (default 65536).
	MaxHints int
	Logger   *slog.Logger
}

// DepositOptions modify Deposit.
type DepositOptions struct {
	// NoEvict pins the block until the returned Claim is released.
	NoEvict bool
}

// State is a key's status for a request, from local knowledge only.
type State uint8

const (
	Miss      State = iota
	Hit             // held locally
	Fetching        // being written locally (a fetch or deposit in progress)
	Fetchable       // this request's hint names a peer said to hold it
)

var stateNames = [...]string{"MISS", "HIT", "FETCHING", "FETCHABLE"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "unknown"
}

// Status is one key's answer to Query. Tier is where the block is or will be
// held locally (host DRAM); it is meaningless for Miss.
type Status struct {
	State State
	Tier  kvevents.Tier
}

// Stats are the runner's counters.
type Stats struct {
	PoolStats
	Hints          int    `json:"hints"`
	Transfers      int    `json:"transfers"` // transfers running now
	Fetches        uint64 `json:"fetches"`
	FetchedBlocks  uint64 `json:"fetched_blocks"`
	FetchMisses    uint64 `json:"fetch_misses"` // requested keys not made local
	Abandoned      uint64 `json:"abandoned"`
	InventoryEvent uint64 `json:"inventory_events"`
	// ServeExpired counts peers' FETCHes this runner's Server cut off: a
	// send outlived TCPConfig.IOTimeout (a reader stalled, often mid-block)
	// or the FETCH outlived TCPConfig.FetchTimeout (a reader too slow). The
	// connection was reset and the pin dropped.
	ServeExpired uint64 `json:"serve_expired"`
}

// Runner is the thread-safe service around a Pool.
type Runner struct {
	cfg   Config
	log   *slog.Logger
	epoch uint64 // random, new at every New: see Epoch

	mu      sync.Mutex
	pool    *Pool
	hints   map[string]*hintState
	waiters map[uint64]chan struct{} // closed when a pending key resolves
	// inflight maps each key a running transfer was asked for to it, so
	// queries say FETCHING and other fetches wait rather than pull twice.
	inflight map[uint64]*fetchOp
	queue    []Inventory // inventory not yet delivered, in order
	spare    []Inventory
	low      bool
	closed   bool

	transfers                                int
	fetches, fetched, fetchMisses, abandoned uint64
	events                                   uint64
	serveExpired                             uint64

	emitMu sync.Mutex // serialises delivery so the sink sees commit order
	wg     sync.WaitGroup
}

// New builds a runner and allocates its pool.
func New(cfg Config) (*Runner, error) {
	if cfg.OperationTimeout <= 0 {
		cfg.OperationTimeout = DefaultOperationTimeout
	}
	if cfg.AbandonTimeout <= 0 {
		cfg.AbandonTimeout = DefaultAbandonTimeout
	}
	if cfg.AbandonTimeout < cfg.OperationTimeout {
		return nil, fmt.Errorf("%w: abandon timeout %v is shorter than operation timeout %v", ErrConfig, cfg.AbandonTimeout, cfg.OperationTimeout)
	}
	if cfg.MaxHints <= 0 {
		cfg.MaxHints = DefaultMaxHints
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	pool, err := NewPool(PoolConfig{BlockBytes: cfg.BlockBytes, Slots: cfg.Capacity, Policy: cfg.Policy, LowWatermark: cfg.LowWatermark})
	if err != nil {
		return nil, err
	}
	return &Runner{
		cfg:      cfg,
		epoch:    newEpoch(),
		log:      cfg.Logger.With("component", "runner"),
		pool:     pool,
		hints:    make(map[string]*hintState),
		waiters:  make(map[uint64]chan struct{}),
		inflight: make(map[uint64]*fetchOp),
	}, nil
}

// BlockBytes returns the configured block size.
func (r *Runner) BlockBytes() int { return r.pool.BlockBytes() }

// Epoch is the runner's start epoch: random and nonzero, new with every
// runner, so that a prober that finds another one knows the blocks it saw
// are gone with the old runner (its Server answers PING with it).
func (r *Runner) Epoch() uint64 { return r.epoch }

// unlock releases r.mu, then delivers queued inventory and signals a
// crossing of the low watermark, so neither callback runs under the lock.
func (r *Runner) unlock() { r.unlockAnd(true) }

// unlockQuiet is unlock for paths that queue no inventory (reads, pins and
// their release): they leave delivery to the goroutines that queued it.
// They must not wait for emitMu: a sink may call Read or Release, and the
// goroutine delivering to it holds emitMu already.
func (r *Runner) unlockQuiet() { r.unlockAnd(false) }

func (r *Runner) unlockAnd(deliver bool) {
	low := r.pool.Low()
	rising := low && !r.low
	r.low = low
	var st PoolStats
	if rising {
		st = r.pool.Stats()
	}
	emit := deliver && len(r.queue) > 0
	r.mu.Unlock()
	if emit {
		r.flush()
	}
	if rising && r.cfg.OnCapacityNeeded != nil {
		r.cfg.OnCapacityNeeded(st)
	}
}

// queueKeyLocked queues a one-key event, allocating only with a sink.
func (r *Runner) queueKeyLocked(key uint64, removed bool) {
	if r.cfg.Sink != nil {
		r.queueLocked([]uint64{key}, removed)
	}
}

func (r *Runner) queueLocked(keys []uint64, removed bool) {
	if r.cfg.Sink == nil || len(keys) == 0 {
		return
	}
	r.queue = append(r.queue, Inventory{Keys: keys, Removed: removed, Tier: kvevents.TierHost})
	r.events++
}

// flush delivers queued inventory in order. Whoever holds emitMu drains the
// whole queue, so when a caller gets emitMu its own events are either still
// queued (it delivers them) or already delivered by the previous holder.
func (r *Runner) flush() {
	r.emitMu.Lock()
	defer r.emitMu.Unlock()
	for {
		r.mu.Lock()
		q := r.queue
		r.queue, r.spare = r.spare[:0], nil
		r.mu.Unlock()
		if len(q) == 0 {
			return
		}
		for _, ev := range q {
			r.cfg.Sink.Inventory(ev)
		}
		clear(q)
		r.mu.Lock()
		r.spare = q[:0]
		r.mu.Unlock()
	}
}

// resolveLocked wakes Fetches waiting for a pending key to commit or abort.
func (r *Runner) resolveLocked(key uint64) {
	if ch, ok := r.waiters[key]; ok {
		close(ch)
		delete(r.waiters, key)
	}
}

// Deposit copies block in as key's block. The inventory event is delivered
// after the block is readable and before Deposit returns. Depositing a key
// already held only refreshes it (and with NoEvict pins it); a key being
// written right now returns ErrBusy. With NoEvict the returned Claim keeps
// the block from eviction until released; otherwise the Claim is nil.
func (r *Runner) Deposit(key uint64, block []byte, opts DepositOptions) (*Claim, error) {
	if len(block) != r.pool.BlockBytes() {
		return nil, fmt.Errorf("deposit %#x: %w: got %d bytes, block bytes is %d", key, ErrBlockSize, len(block), r.pool.BlockBytes())
	}
	r.mu.Lock()
	res, err := r.pool.Reserve(key)
	if errors.Is(err, ErrExists) {
		slot, _ := r.pool.Pin(key)
		if opts.NoEvict {
			r.unlock()
			return r.newClaim(slot, key), nil
		}
		r.pool.Unpin(slot)
		r.unlock()
		return nil, nil
	}
	if err != nil {
		r.unlock()
		return nil, fmt.Errorf("deposit %#x: %w", key, err)
	}
	if res.HasEvicted {
		r.queueKeyLocked(res.Evicted, true)
	}
	r.unlock()

	// The slot is reserved to us: copy without the lock.
	copy(r.pool.Buffer(res.Slot), block)

	r.mu.Lock()
	r.pool.Commit(res.Slot, 0, false, opts.NoEvict)
	r.queueKeyLocked(key, false)
	r.resolveLocked(key)
	r.unlock()
	if opts.NoEvict {
		return r.newClaim(res.Slot, key), nil
	}
	return nil, nil
}

// Query reports each key's status for requestID. It never blocks on I/O.
func (r *Runner) Query(keys []uint64, requestID string) []Status {
	return r.AppendQuery(make([]Status, 0, len(keys)), keys, requestID)
}

// AppendQuery is Query appending to dst.
func (r *Runner) AppendQuery(dst []Status, keys []uint64, requestID string) []Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.hints[requestID]
	for _, k := range keys {
		st := Status{Tier: kvevents.TierHost}
		switch r.pool.Lookup(k) {
		case Present:
			st.State = Hit
		case Pending:
			st.State = Fetching
		default:
			if _, ok := r.inflight[k]; ok {
				st.State = Fetching
			} else if h != nil && !h.conflict {
				if gaveUp, ok := h.keys[k]; ok && !gaveUp {
					st.State = Fetchable
				}
			}
		}
		dst = append(dst, st)
	}
	return dst
}

// Evict removes keys' blocks and reports how many it removed. A claimed
// block disappears from queries at once; its memory is reused after release.
func (r *Runner) Evict(keys ...uint64) int {
	r.mu.Lock()
	var removed []uint64
	for _, k := range keys {
		if r.pool.Remove(k) {
			removed = append(removed, k)
		}
	}
	r.queueLocked(removed, true)
	r.unlock()
	return len(removed)
}

// EvictAll removes every block and reports how many.
func (r *Runner) EvictAll() int {
	r.mu.Lock()
	removed := r.pool.RemoveAll(nil)
	r.queueLocked(removed, true)
	r.unlock()
	return len(removed)
}

// Stats returns the runner's counters.
func (r *Runner) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Stats{
		PoolStats:      r.pool.Stats(),
		Hints:          len(r.hints),
		Transfers:      r.transfers,
		Fetches:        r.fetches,
		FetchedBlocks:  r.fetched,
		FetchMisses:    r.fetchMisses,
		Abandoned:      r.abandoned,
		InventoryEvent: r.events,
		ServeExpired:   r.serveExpired,
	}
}

// countServeExpired counts a FETCH a Server cut off at its deadline.
func (r *Runner) countServeExpired() {
	r.mu.Lock()
	r.serveExpired++
	r.mu.Unlock()
}

// Close refuses new fetches and waits until every transfer has stopped, so
// no transfer writes into the pool afterwards. It does not close the
// transport.
func (r *Runner) Close() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.wg.Wait()
	return nil
}
