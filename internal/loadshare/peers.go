// This file holds the load announcements between replicas and the book of peers' requests.

package loadshare

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"kvrouter/internal/cost"
)

// loadSubject is where router replicas announce the requests they send.
const loadSubject = "kvrouter.load"

// Load announcement ops.
const (
	opStart  = "start"
	opFirst  = "first" // first token: the prompt is prefilled
	opFinish = "finish"
	opAlive  = "alive" // heartbeat with every request still in flight
)

// loadMsg is one announcement. Ids carry the replica's name, so two
// replicas never collide and a replayed announcement is a no-op.
type loadMsg struct {
	Replica string   `json:"-"` // from the batch
	Op      string   `json:"op"`
	ID      string   `json:"id,omitempty"`
	Worker  string   `json:"worker,omitempty"`
	Rank    int      `json:"dp_rank,omitempty"`
	Prefill float64  `json:"prefill_tokens,omitempty"`
	Blocks  float64  `json:"blocks,omitempty"`
	IDs     []string `json:"ids,omitempty"`
}

// peerBook applies peers' announcements to the load tracker and forgets a
// peer that stopped announcing, along with everything it had in flight.
// Pure: the caller passes the time.
type peerBook struct {
	load    *cost.Load
	timeout time.Duration

	mu    sync.Mutex
	peers map[string]*peer
	known atomic.Int32 // len(peers), read without mu
}

type peer struct {
	seen time.Time
	reqs map[string]bool
}

func newPeerBook(load *cost.Load, timeout time.Duration) *peerBook {
	return &peerBook{load: load, timeout: timeout, peers: map[string]*peer{}}
}

// apply records m; met reports a replica not heard from before.
func (b *peerBook) apply(m loadMsg, now time.Time) (met bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.peers[m.Replica]
	if p == nil {
		p = &peer{reqs: map[string]bool{}}
		b.peers[m.Replica] = p
		b.known.Store(int32(len(b.peers)))
		met = true
	}
	p.seen = now
	switch m.Op {
	case opStart:
		if m.ID != "" && m.Worker != "" {
			b.load.Start(m.ID, cost.Rank{Worker: m.Worker, DP: m.Rank}, m.Prefill, m.Blocks)
			p.reqs[m.ID] = true
		}
	case opFirst:
		b.load.Prefilled(m.ID)
	case opFinish:
		b.load.Finish(m.ID)
		delete(p.reqs, m.ID)
	case opAlive:
		// A finish that went missing would count forever: the heartbeat
		// lists what is really in flight. A peer's messages arrive in
		// order, so anything it no longer lists has ended.
		live := make(map[string]bool, len(m.IDs))
		for _, id := range m.IDs {
			live[id] = true
		}
		for id := range p.reqs {
			if !live[id] {
				b.load.Finish(id)
				delete(p.reqs, id)
			}
		}
	}
	return met
}

// expire drops peers not heard from within the timeout.
func (b *peerBook) expire(now time.Time) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var gone []string
	for name, p := range b.peers {
		if now.Sub(p.seen) < b.timeout {
			continue
		}
		for id := range p.reqs {
			b.load.Finish(id)
		}
		delete(b.peers, name)
		gone = append(gone, name)
	}
	b.known.Store(int32(len(b.peers)))
	return gone
}

// Peers shares in-flight load with the other replicas on the same NATS:
// it is the server's LoadTracker, recording locally and announcing.
type Peers struct {
	nc      *nats.Conn
	replica string
	load    *cost.Load
	// every is the heartbeat interval; a peer silent for timeout is
	// forgotten.
	every, timeout time.Duration
	metrics        *Metrics
	log            *slog.Logger
	now            func() time.Time

	book *peerBook
	mu   sync.Mutex
	mine map[string]bool
	// Announcements wait in pending for up to batchDelay and leave in one
	// NATS message: one per request start and end cost the router as much
	// as its decision did.
	pmu     sync.Mutex
	pending []loadMsg
	spare   []loadMsg
	kick    chan struct{}
	own     []byte // how this replica's batches begin, to skip them unread
}

// loadBatch is the NATS payload: one replica's announcements, in order.
type loadBatch struct {
	Replica string    `json:"replica"`
	Msgs    []loadMsg `json:"msgs"`
}

const (
	batchDelay = time.Millisecond
	batchMax   = 512 // messages per payload, well below any NATS max_payload
)

// NewPeers returns a tracker that announces on nc (nil: local only).
func NewPeers(nc *nats.Conn, replica string, load *cost.Load, every, timeout time.Duration, m *Metrics, log *slog.Logger, now func() time.Time) *Peers {
	own, _ := json.Marshal(loadBatch{Replica: replica}) // {"replica":"…","msgs":null}
	own = own[:bytes.LastIndexByte(own, ',')+1]
	return &Peers{nc: nc, replica: replica, load: load, every: every, timeout: timeout, metrics: m, log: log, now: now,
		book: newPeerBook(load, timeout), mine: map[string]bool{}, kick: make(chan struct{}, 1), own: own}
}

// Start, Finish and the heartbeat publish under mu, so that a heartbeat
// never overtakes a start it does not list.
func (p *Peers) Start(id string, r cost.Rank, prefill, blocks float64) {
	p.load.Start(id, r, prefill, blocks)
	if p.alone() {
		// No one to announce it to, nor to list it for in a heartbeat
		// (a replica met later never heard of it).
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mine[id] = true
	p.publish(loadMsg{Op: opStart, ID: id, Worker: r.Worker, Rank: r.DP, Prefill: prefill, Blocks: blocks})
}

func (p *Peers) Prefilled(id string) {
	p.load.Prefilled(id)
	p.publish(loadMsg{Op: opFirst, ID: id})
}

func (p *Peers) Finish(id string) {
	p.load.Finish(id)
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.mine, id)
	p.publish(loadMsg{Op: opFinish, ID: id})
}

// publish queues m for the other replicas. A replica that knows of none
// announces only its heartbeats: a lone router's per-request messages cost
// it 3% of its CPU (encoding them, and NATS echoing them back) for no one.
// Others learn of it from its heartbeat, it of them from theirs, and each
// answers a newcomer's with its own at once, so sharing starts within
// moments of a second replica appearing (requests already in flight then
// are not shared: they end soon).
func (p *Peers) publish(m loadMsg) {
	if p.nc == nil || (m.Op != opAlive && p.alone()) {
		return
	}
	p.pmu.Lock()
	p.pending = append(p.pending, m)
	first := len(p.pending) == 1
	p.pmu.Unlock()
	if first {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
}

// flush sends what is pending, batchMax messages a payload.
func (p *Peers) flush() {
	p.pmu.Lock()
	all := p.pending
	p.pending = p.spare[:0]
	p.pmu.Unlock()
	for msgs := all; len(msgs) > 0; {
		n := min(len(msgs), batchMax)
		b, err := json.Marshal(loadBatch{Replica: p.replica, Msgs: msgs[:n]})
		if err == nil {
			err = p.nc.Publish(loadSubject, b)
		}
		if err != nil {
			p.log.Debug("peers: announce failed", "err", err)
		} else {
			p.metrics.peerMessages.WithLabelValues("out").Add(float64(n))
		}
		msgs = msgs[n:]
	}
	clear(all) // keeps no ids alive
	p.pmu.Lock()
	p.spare = all[:0]
	p.pmu.Unlock()
}

// Run applies peers' announcements and sends heartbeats until ctx ends.
func (p *Peers) Run(ctx context.Context) error {
	if p.nc == nil {
		<-ctx.Done()
		return nil
	}
	msgs := make(chan *nats.Msg, 4096)
	sub, err := p.nc.ChanSubscribe(loadSubject, msgs)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	p.heartbeat() // here we are: replicas already running start sharing
	t := time.NewTicker(p.every)
	defer t.Stop()
	batch := time.NewTimer(batchDelay)
	batch.Stop()
	defer p.flush()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.kick:
			batch.Reset(batchDelay)
		case <-batch.C:
			p.flush()
		case nm := <-msgs:
			if bytes.HasPrefix(nm.Data, p.own) {
				continue // ours, echoed back
			}
			var b loadBatch
			if json.Unmarshal(nm.Data, &b) != nil || b.Replica == "" || b.Replica == p.replica {
				continue
			}
			p.metrics.peerMessages.WithLabelValues("in").Add(float64(len(b.Msgs)))
			now := p.now()
			met := false
			for _, m := range b.Msgs {
				m.Replica = b.Replica
				met = p.book.apply(m, now) || met
			}
			if met {
				p.log.Info("peers: replica announcing; sharing load with it", "replica", b.Replica)
				p.heartbeat()
			}
		case <-t.C:
			p.heartbeat()
			for _, name := range p.book.expire(p.now()) {
				p.log.Info("peers: replica stopped announcing; dropping its load", "replica", name)
			}
		}
	}
}

// alone reports whether no other replica is known to share load with.
func (p *Peers) alone() bool { return p.nc == nil || p.book.known.Load() == 0 }

// heartbeat announces this replica with every request it has in flight.
func (p *Peers) heartbeat() {
	p.mu.Lock()
	defer p.mu.Unlock()
	ids := make([]string, 0, len(p.mine))
	for id := range p.mine {
		ids = append(ids, id)
	}
	p.publish(loadMsg{Op: opAlive, IDs: ids})
}
