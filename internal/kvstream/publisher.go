// This file holds Publisher: the engine side of the stream and of replay.

package kvstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"kvrouter/internal/zmtp"
)

// Publisher defaults (the engine defaults of docs/wire.md §2.1).
const (
	DefaultBufferSteps = 10000
	DefaultHWM         = 100000
)

// ErrClosed is returned by Publish after Close.
var ErrClosed = errors.New("kvstream: publisher closed")

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// Endpoint: the PUB binds when Binds(Endpoint), else it dials (bind-mode
	// subscribers), retrying with Backoff until it connects.
	Endpoint string
	// ReplayEndpoint, if set, is bound by a ROUTER answering replay requests.
	ReplayEndpoint string
	// BufferSteps is how many of the latest batches replay can serve
	// (default DefaultBufferSteps).
	BufferSteps int
	// FirstSeq is the seq of the first batch (engines: 0; llm-d's simulator: 1).
	FirstSeq uint64
	// HWM is the PUB send queue limit, per subscriber; past it batches are
	// dropped from the wire for that subscriber (they stay replayable,
	// and are counted in PublisherStats.Dropped). Default DefaultHWM.
	HWM int
	// Backoff spaces the PUB's redials when it dials.
	Backoff     Backoff
	DialTimeout time.Duration
	// WriteTimeout: a subscriber or replay client that accepts no byte
	// for this long is dropped (default zmtp.DefaultWriteTimeout).
	WriteTimeout time.Duration
	// Limits bound what subscribers (and strangers) can make the sockets
	// hold.
	Limits
	// Snapshot, with its Endpoint set, serves SGLang's snapshot-v1 (see
	// PublishEvents).
	Snapshot SnapshotServerConfig
	Logger   *slog.Logger
}

// PublisherStats are a Publisher's counters since it was made.
type PublisherStats struct {
	Published uint64 // batches stamped
	// Dropped counts batches not sent to a subscriber at its HWM: a
	// subscriber that reads too slowly misses them (they stay replayable).
	Dropped uint64
	// Stalled counts subscribers and replay clients dropped for accepting
	// no byte within WriteTimeout.
	Stalled         uint64
	ReplayRequests  uint64 // well-formed replay requests answered
	ReplayMalformed uint64 // replay requests dropped unanswered
	// Connections dropped by the ZMTP layer, as in Stats.
	Oversize          uint64
	ProtocolErrors    uint64
	HandshakeFailures uint64
	PeersRefused      uint64
	HeartbeatTimeouts uint64
}

// Publisher sends batches the way vLLM and SGLang do: [topic, seq, payload]
// on a PUB socket, with a ring buffer served on a replay ROUTER. It is safe
// for concurrent use. A dialing Publisher redials with Backoff whenever
// its connection fails or ends. Publish never blocks on a subscriber.
type Publisher struct {
	log    *slog.Logger
	pub    *zmtp.Socket
	router *zmtp.Socket // nil without ReplayEndpoint
	snap   *snapshotServer
	cancel context.CancelFunc
	srvWG  sync.WaitGroup
	net    zmtp.Counters

	published, replayRequests, replayMalformed atomic.Uint64

	mu     sync.Mutex
	next   uint64
	ring   *ring
	closed bool
	// skip, a test hook, keeps a seq off the wire but in the ring.
	skip func(seq uint64) bool
}

// NewPublisher binds (or starts dialing) the PUB socket and binds the
// replay ROUTER.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if cfg.Endpoint == "" {
		return nil, fmt.Errorf("%w: Endpoint is empty", ErrConfig)
	}
	if cfg.BufferSteps < 0 || cfg.HWM < 0 {
		return nil, fmt.Errorf("%w: BufferSteps and HWM must be >= 0", ErrConfig)
	}
	if cfg.BufferSteps == 0 {
		cfg.BufferSteps = DefaultBufferSteps
	}
	if cfg.HWM == 0 {
		cfg.HWM = DefaultHWM
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("endpoint", cfg.Endpoint)
	ctx, cancel := context.WithCancel(context.Background())
	p := &Publisher{
		log:    log,
		cancel: cancel,
		next:   cfg.FirstSeq,
		ring:   newRing(cfg.BufferSteps),
	}
	opts := socketOptions(log, cfg.DialTimeout, cfg.Limits, cfg.Backoff, &p.net)
	opts.SendHWM = cfg.HWM
	opts.WriteTimeout = cfg.WriteTimeout
	var err error
	if p.pub, err = zmtp.New(zmtp.Pub, opts); err != nil {
		cancel()
		return nil, err
	}
	if Binds(cfg.Endpoint) {
		if err := p.pub.Listen(cfg.Endpoint); err != nil {
			p.Close()
			return nil, fmt.Errorf("kvstream: bind Endpoint %s: %w", cfg.Endpoint, err)
		}
	} else if err := p.pub.Connect(cfg.Endpoint); err != nil {
		p.Close()
		return nil, fmt.Errorf("kvstream: Endpoint %s: %w", cfg.Endpoint, err)
	}
	if cfg.ReplayEndpoint != "" {
		// A replay answer waits for room rather than dropping batches;
		// WriteTimeout bounds how long a client that stops reading holds it.
		if p.router, err = zmtp.New(zmtp.Router, opts); err != nil {
			p.Close()
			return nil, err
		}
		if err := p.router.Listen(cfg.ReplayEndpoint); err != nil {
			p.Close()
			return nil, fmt.Errorf("kvstream: bind ReplayEndpoint %s: %w", cfg.ReplayEndpoint, err)
		}
		p.srvWG.Add(1)
		go p.serveReplay(ctx)
	}
	if cfg.Snapshot.Endpoint != "" {
		if err := p.startSnapshots(ctx, cfg.Snapshot, opts); err != nil {
			p.Close()
			return nil, err
		}
	}
	return p, nil
}

// Publish stamps the next seq on payload and sends it. The publisher keeps
// payload for replay: the caller must not modify it afterwards.
func (p *Publisher) Publish(topic string, payload []byte) (seq uint64, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.publishLocked(topic, payload)
}

// publishLocked is Publish with p.mu held.
func (p *Publisher) publishLocked(topic string, payload []byte) (seq uint64, err error) {
	if p.closed {
		return 0, ErrClosed
	}
	seq = p.next
	p.next++
	p.published.Add(1)
	p.ring.add(seq, payload)
	if p.skip != nil && p.skip(seq) {
		return seq, nil
	}
	// The send only queues (each subscriber has its own writer), so
	// holding the lock keeps seqs in wire order at little cost.
	if err := p.pub.Send(context.Background(), EncodeMessage(topic, seq, payload)); err != nil {
		return seq, fmt.Errorf("kvstream: publish seq %d: %w", seq, err)
	}
	return seq, nil
}

// Addr is the PUB's bound address (nil when it dials).
func (p *Publisher) Addr() net.Addr { return p.pub.Addr() }

// ReplayAddr is the replay ROUTER's bound address (nil without one).
func (p *Publisher) ReplayAddr() net.Addr {
	if p.router == nil {
		return nil
	}
	return p.router.Addr()
}

// Stats returns the counters.
func (p *Publisher) Stats() PublisherStats {
	n := p.net.Snapshot()
	return PublisherStats{
		Published:         p.published.Load(),
		Dropped:           n.SendDropped,
		Stalled:           n.Stalled,
		ReplayRequests:    p.replayRequests.Load(),
		ReplayMalformed:   p.replayMalformed.Load(),
		Oversize:          n.Oversize,
		ProtocolErrors:    n.ProtocolErrors,
		HandshakeFailures: n.HandshakeFailures,
		PeersRefused:      n.Refused,
		HeartbeatTimeouts: n.HeartbeatTimeouts,
	}
}

// Close stops the publisher and waits for its goroutines.
func (p *Publisher) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()

	p.cancel()
	err := p.pub.Close()
	for _, s := range []*zmtp.Socket{p.router, p.snapSocket()} {
		if s == nil {
			continue
		}
		if e := s.Close(); err == nil {
			err = e
		}
	}
	p.srvWG.Wait()
	if err != nil {
		return fmt.Errorf("kvstream: close publisher: %w", err)
	}
	return nil
}

// serveReplay answers replay requests as docs/wire.md §2.4 prescribes: every
// buffered batch with seq >= start, then the end marker; malformed requests
// get no answer.
func (p *Publisher) serveReplay(ctx context.Context) {
	defer p.srvWG.Done()
	var entries []ringEntry
	for {
		m, err := p.router.Recv(ctx)
		if err != nil {
			return
		}
		id := m.Frames[0]
		start, err := ParseReplayRequest(m.Frames[1:])
		if err != nil {
			p.replayMalformed.Add(1)
			p.log.Debug("kvstream: ignored replay request", "err", err)
			continue
		}
		p.replayRequests.Add(1)
		p.mu.Lock()
		entries = p.ring.from(entries[:0], start)
		p.mu.Unlock()
		if err := p.answer(ctx, id, entries); err != nil {
			p.log.Debug("kvstream: replay answer cut", "start", start, "err", err)
		}
		clear(entries)
	}
}

func (p *Publisher) answer(ctx context.Context, id []byte, entries []ringEntry) error {
	ctx, cancel := context.WithTimeout(ctx, DefaultReplayTimeout)
	defer cancel()
	for _, e := range entries {
		if err := p.router.Send(ctx, append([][]byte{id}, EncodeReplayReply(e.seq, e.payload)...)); err != nil {
			return err
		}
	}
	return p.router.Send(ctx, append([][]byte{id}, EncodeReplayEnd()...))
}
