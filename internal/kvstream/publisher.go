package kvstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
)

// Publisher defaults (SPEC 2.1 engine defaults).
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
	// HWM is the PUB send queue limit; past it batches are dropped from the
	// wire (they stay replayable). Default DefaultHWM.
	HWM         int
	Backoff     Backoff
	DialTimeout time.Duration
	Logger      *slog.Logger
}

// Publisher sends batches the way vLLM and SGLang do: [topic, seq, payload]
// on a PUB socket, with a ring buffer served on a replay ROUTER. It is safe
// for concurrent use.
//
// A dialing Publisher connects once and does not notice losing the
// subscriber afterwards (zmq4 reports no disconnects to the sender).
// zmq4 v0.17.0 leaks one goroutine per PUB socket (its send loop is never
// stopped by Close).
type Publisher struct {
	log    *slog.Logger
	pub    zmq4.Socket
	router zmq4.Socket // nil without ReplayEndpoint
	cancel context.CancelFunc
	dialWG sync.WaitGroup
	srvWG  sync.WaitGroup

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
	opts := socketOptions(log, cfg.DialTimeout)
	p := &Publisher{
		log:    log,
		pub:    zmq4.NewPub(ctx, opts...),
		cancel: cancel,
		next:   cfg.FirstSeq,
		ring:   newRing(cfg.BufferSteps),
	}
	if err := p.pub.SetOption(zmq4.OptionHWM, cfg.HWM); err != nil {
		p.Close()
		return nil, fmt.Errorf("kvstream: set HWM %d: %w", cfg.HWM, err)
	}
	if Binds(cfg.Endpoint) {
		if err := p.pub.Listen(cfg.Endpoint); err != nil {
			p.Close()
			return nil, fmt.Errorf("kvstream: bind Endpoint %s: %w", cfg.Endpoint, err)
		}
	} else {
		p.dialWG.Add(1)
		go p.dial(ctx, cfg.Endpoint, cfg.Backoff)
	}
	if cfg.ReplayEndpoint != "" {
		p.router = zmq4.NewRouter(ctx, opts...)
		if err := p.router.Listen(cfg.ReplayEndpoint); err != nil {
			p.Close()
			return nil, fmt.Errorf("kvstream: bind ReplayEndpoint %s: %w", cfg.ReplayEndpoint, err)
		}
		p.srvWG.Add(1)
		go p.serveReplay(ctx)
	}
	return p, nil
}

// Publish stamps the next seq on payload and sends it. The publisher keeps
// payload for replay: the caller must not modify it afterwards.
func (p *Publisher) Publish(topic string, payload []byte) (seq uint64, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0, ErrClosed
	}
	seq = p.next
	p.next++
	p.ring.add(seq, payload)
	if p.skip != nil && p.skip(seq) {
		return seq, nil
	}
	// The send only queues (zmq4's PUB writes from its own goroutine), so
	// holding the lock keeps seqs in wire order at little cost.
	if err := p.pub.Send(zmq4.NewMsgFrom(EncodeMessage(topic, seq, payload)...)); err != nil {
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
	// A dial that completes after Close would leave a live connection
	// behind, so wait for the dialer first.
	p.dialWG.Wait()
	err := p.pub.Close()
	if p.router != nil {
		if e := p.router.Close(); err == nil {
			err = e
		}
	}
	p.srvWG.Wait()
	if p.router != nil {
		drain(p.router)
	}
	if err != nil {
		return fmt.Errorf("kvstream: close publisher: %w", err)
	}
	return nil
}

func (p *Publisher) dial(ctx context.Context, endpoint string, b Backoff) {
	defer p.dialWG.Done()
	for attempt := 0; ; attempt++ {
		err := p.pub.Dial(endpoint)
		if err == nil {
			return
		}
		p.log.Debug("kvstream: publisher dial failed", "attempt", attempt, "err", err)
		t := time.NewTimer(b.Delay(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// serveReplay answers replay requests as SPEC 2.1 prescribes: every
// buffered batch with seq >= start, then the end marker; malformed requests
// get no answer.
func (p *Publisher) serveReplay(ctx context.Context) {
	defer p.srvWG.Done()
	var entries []ringEntry
	for {
		m, err := p.router.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			continue
		}
		if m.Type == zmq4.CmdMsg || len(m.Frames) == 0 {
			continue
		}
		id := m.Frames[0]
		start, err := ParseReplayRequest(m.Frames[1:])
		if err != nil {
			p.log.Debug("kvstream: ignored replay request", "err", err)
			continue
		}
		p.mu.Lock()
		entries = p.ring.from(entries[:0], start)
		p.mu.Unlock()
		if err := p.answer(id, entries); err != nil {
			p.log.Debug("kvstream: replay answer cut", "start", start, "err", err)
		}
		clear(entries)
	}
}

func (p *Publisher) answer(id []byte, entries []ringEntry) error {
	for _, e := range entries {
		if err := p.router.Send(zmq4.NewMsgFrom(append([][]byte{id}, EncodeReplayReply(e.seq, e.payload)...)...)); err != nil {
			return err
		}
	}
	return p.router.Send(zmq4.NewMsgFrom(append([][]byte{id}, EncodeReplayEnd()...)...))
}
