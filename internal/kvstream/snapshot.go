// This file holds SGLang's snapshot-v1 over ZMQ: the client a subscriber's driver fetches a cut with, and the Publisher's side of it.

package kvstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"kvrouter/internal/kvencode"
	"kvrouter/internal/kvevents"
	"kvrouter/internal/zmtp"
)

// Wire facts of snapshot-v1 (docs/wire.md §2.5), as SGLang's
// ZmqEventPublisher speaks it.
const (
	// snapshotRequest is the request: ["", "snapshot-v1"].
	snapshotRequest = "snapshot-v1"
	// Answer frames as the DEALER sees them: ["", kind, payload].
	snapshotHeader = "header"
	snapshotChunk  = "chunk"
	snapshotEnd    = "end"
	snapshotError  = "error"
	snapshotFrames = 3
	// snapshotSep follows the epoch on a snapshot barrier's topic:
	// topic + epochSep + epoch + snapshotSep + barrier id.
	snapshotSep = "\x00sgl-kv-snapshot="
	// snapshotChunkRecords is how many records SGLang puts in a chunk.
	snapshotChunkRecords = 4096
)

// Snapshot defaults.
const (
	// DefaultSnapshotTimeout bounds one snapshot exchange: SGLang gives
	// its capture 5 s and then streams the chunks.
	DefaultSnapshotTimeout = 10 * time.Second
	// DefaultMaxSnapshotRecords bounds the records one answer may carry
	// (about 64 bytes each held).
	DefaultMaxSnapshotRecords = 1 << 22
)

var (
	// ErrSnapshot wraps every failed snapshot exchange.
	ErrSnapshot = errors.New("kvstream: snapshot failed")
	// ErrSnapshotRefused: the engine answered with an error frame (its
	// text follows), e.g. "snapshot provider busy".
	ErrSnapshotRefused = fmt.Errorf("%w: the engine refused", ErrSnapshot)
)

// EpochSuffix is the part of a live topic that names SGLang's publisher
// epoch, as TopicEpoch returns it: the form a snapshot header's epoch takes
// on the stream.
func EpochSuffix(epoch string) string { return epochSep + epoch }

// Snapshot is an engine's placement cut (kvevents.SnapshotHeader says
// where the live stream resumes after it).
type Snapshot struct {
	Header kvevents.SnapshotHeader
	Blocks []kvevents.SnapshotBlock
}

// SnapshotClientConfig bounds one snapshot exchange.
type SnapshotClientConfig struct {
	Timeout     time.Duration // default DefaultSnapshotTimeout
	DialTimeout time.Duration
	MaxRecords  int // default DefaultMaxSnapshotRecords
	Limits
	Logger *slog.Logger
}

// FetchSnapshot asks the engine's snapshot endpoint (dialable) for a cut:
// a DEALER sends ["", "snapshot-v1"] and reads the header, the chunks and
// the end (or an error frame). The answer is complete or an error: the
// records must number what the header says.
func FetchSnapshot(ctx context.Context, endpoint string, cfg SnapshotClientConfig) (*Snapshot, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultSnapshotTimeout
	}
	if cfg.MaxRecords <= 0 {
		cfg.MaxRecords = DefaultMaxSnapshotRecords
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	opts := socketOptions(log, cfg.DialTimeout, cfg.Limits, Backoff{}, nil)
	opts.Events = true
	d, err := zmtp.New(zmtp.Dealer, opts)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	fail := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrSnapshot, endpoint, fmt.Sprintf(format, a...))
	}
	if err := d.Dial(ctx, endpoint); err != nil {
		return nil, fail("dial: %v", err)
	}
	if err := d.Send(ctx, [][]byte{{}, []byte(snapshotRequest)}); err != nil {
		return nil, fail("request: %v", err)
	}
	var s *Snapshot
	for {
		m, err := d.Recv(ctx)
		if err == nil && m.Event == zmtp.EventDisconnected {
			err = fmt.Errorf("connection lost: %w", m.Err)
		}
		if err != nil {
			return nil, fail("%v", err)
		}
		if m.Event != zmtp.EventMessage {
			continue
		}
		if len(m.Frames) != snapshotFrames || len(m.Frames[0]) != 0 {
			return nil, fail("%v: answer of %d frames, want %d (empty delimiter, kind, payload)", ErrMalformed, len(m.Frames), snapshotFrames)
		}
		kind, p := string(m.Frames[1]), m.Frames[2]
		switch {
		case kind == snapshotError:
			return nil, fmt.Errorf("%w: %s: %q", ErrSnapshotRefused, endpoint, printable(p))
		case s == nil && kind == snapshotHeader:
			h, err := kvevents.DecodeSnapshotHeader(p)
			if err != nil {
				return nil, fail("%v", err)
			}
			if h.RecordCount > uint64(cfg.MaxRecords) {
				return nil, fail("header announces %d records, at most %d taken", h.RecordCount, cfg.MaxRecords)
			}
			s = &Snapshot{Header: h, Blocks: make([]kvevents.SnapshotBlock, 0, h.RecordCount)}
		case s != nil && kind == snapshotChunk:
			if s.Blocks, err = kvevents.DecodeSnapshotChunk(p, s.Blocks); err != nil {
				return nil, fail("%v", err)
			}
			if uint64(len(s.Blocks)) > s.Header.RecordCount {
				return nil, fail("more records than the header's %d", s.Header.RecordCount)
			}
		case s != nil && kind == snapshotEnd:
			if uint64(len(s.Blocks)) != s.Header.RecordCount {
				return nil, fail("%d records, the header announced %d", len(s.Blocks), s.Header.RecordCount)
			}
			return s, nil
		default:
			return nil, fail("%v: unexpected %q frame", ErrMalformed, printable(m.Frames[1]))
		}
	}
}

// printable keeps a peer's text short and printable for errors and logs.
func printable(p []byte) string {
	if len(p) > 200 {
		p = p[:200]
	}
	b := make([]byte, len(p))
	for i, c := range p {
		if c < 0x20 || c > 0x7e {
			c = '?'
		}
		b[i] = c
	}
	return string(b)
}

// SnapshotServerConfig makes a Publisher serve snapshot-v1 as SGLang's
// publisher does. The Publisher then keeps a placement mirror of what the
// batches published with PublishEvents stored (by block hash, whatever the
// medium, as SGLang's does) and answers a request with a cut of it: it
// stamps an empty barrier batch on Topic+EpochSuffix(Epoch)+snapshotSep+id,
// under the same lock as the copy, and answers the header (resume seq: the
// barrier's + 1), the records in chunks, and the end.
type SnapshotServerConfig struct {
	Endpoint    string // the ROUTER's bind address; "" serves none
	Topic       string // the publisher's base topic
	Epoch       string // the publisher's epoch (its live topics name it)
	ReplicaRank int    // the DP rank, stamped on the header and barrier
}

// snapshotServer is a Publisher's snapshot-v1 side; the mirror is guarded
// by the Publisher's mu, so a cut and the seq of its barrier are one.
type snapshotServer struct {
	cfg    SnapshotServerConfig
	sock   *zmtp.Socket
	mirror map[uint64]kvevents.SnapshotBlock
	enc    kvencode.Encoder
}

func (p *Publisher) snapSocket() *zmtp.Socket {
	if p.snap == nil {
		return nil
	}
	return p.snap.sock
}

func (p *Publisher) startSnapshots(ctx context.Context, cfg SnapshotServerConfig, opts zmtp.Options) error {
	sock, err := zmtp.New(zmtp.Router, opts)
	if err != nil {
		return err
	}
	if err := sock.Listen(cfg.Endpoint); err != nil {
		sock.Close()
		return fmt.Errorf("kvstream: bind snapshot endpoint %s: %w", cfg.Endpoint, err)
	}
	p.snap = &snapshotServer{cfg: cfg, sock: sock, mirror: map[uint64]kvevents.SnapshotBlock{},
		enc: kvencode.Encoder{Format: kvencode.SGLangMap, Envelope: kvencode.EnvelopeArray}}
	p.srvWG.Add(1)
	go p.serveSnapshots(ctx)
	return nil
}

// SnapshotAddr is the snapshot ROUTER's bound address (nil without one).
func (p *Publisher) SnapshotAddr() net.Addr {
	if p.snap == nil {
		return nil
	}
	return p.snap.sock.Addr()
}

// PublishEvents is Publish for a batch whose events are evs: a Publisher
// that serves snapshots applies them to its mirror with the seq stamped.
// Like SGLang's, the mirror advances even when the send fails: the batch is
// in the replay buffer all the same.
func (p *Publisher) PublishEvents(topic string, payload []byte, evs []kvevents.Event) (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	seq, err := p.publishLocked(topic, payload)
	if p.snap != nil && !errors.Is(err, ErrClosed) {
		p.snap.apply(evs)
	}
	return seq, err
}

// apply is SGLang's _apply_snapshot_events: one record per stored block,
// under the block before it.
func (s *snapshotServer) apply(evs []kvevents.Event) {
	for i := range evs {
		ev := &evs[i]
		switch ev.Kind {
		case kvevents.KindStored:
			parent, has := ev.ParentHash, ev.HasParent
			for _, h := range ev.BlockHashes {
				s.mirror[h] = kvevents.SnapshotBlock{Parent: parent, HasParent: has, Hashes: []uint64{h}}
				parent, has = h, true
			}
		case kvevents.KindRemoved:
			for _, h := range ev.BlockHashes {
				delete(s.mirror, h)
			}
		case kvevents.KindCleared:
			clear(s.mirror)
		}
	}
}

func (p *Publisher) serveSnapshots(ctx context.Context) {
	defer p.srvWG.Done()
	s := p.snap
	for {
		m, err := s.sock.Recv(ctx)
		if err != nil {
			return
		}
		id := m.Frames[0]
		req := m.Frames[1:]
		if len(req) != 2 {
			p.log.Debug("kvstream: ignored snapshot request", "frames", len(req))
			continue
		}
		if len(req[0]) != 0 || string(req[1]) != snapshotRequest {
			p.sendSnapshot(ctx, id, snapshotError, []byte("invalid snapshot-v1 request"))
			continue
		}
		h, blocks, err := p.cut()
		if err != nil {
			p.sendSnapshot(ctx, id, snapshotError, []byte("snapshot capture failed"))
			continue
		}
		if !p.sendSnapshot(ctx, id, snapshotHeader, kvencode.AppendSnapshotHeader(nil, h)) {
			continue
		}
		ok := true
		for i := 0; ok && i < len(blocks); i += snapshotChunkRecords {
			ok = p.sendSnapshot(ctx, id, snapshotChunk, kvencode.AppendSnapshotChunk(nil, blocks[i:min(i+snapshotChunkRecords, len(blocks))]))
		}
		if ok {
			p.sendSnapshot(ctx, id, snapshotEnd, []byte{})
		}
	}
}

// cut stamps the barrier and copies the mirror, under the lock that stamps
// seqs: the cut holds exactly the batches before the barrier.
func (p *Publisher) cut() (kvevents.SnapshotHeader, []kvevents.SnapshotBlock, error) {
	s := p.snap
	var idb [16]byte
	rand.Read(idb[:]) // never fails on supported platforms (it panics otherwise)
	id := hex.EncodeToString(idb[:])
	payload, err := s.enc.Encode(kvevents.Batch{TS: float64(time.Now().UnixNano()) / 1e9, DPRank: s.cfg.ReplicaRank, HasDPRank: true})
	if err != nil {
		return kvevents.SnapshotHeader{}, nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	topic := s.cfg.Topic + EpochSuffix(s.cfg.Epoch) + snapshotSep + id
	barrier, err := p.publishLocked(topic, payload)
	if errors.Is(err, ErrClosed) {
		return kvevents.SnapshotHeader{}, nil, err
	}
	blocks := make([]kvevents.SnapshotBlock, 0, len(s.mirror))
	for _, b := range s.mirror {
		blocks = append(blocks, b)
	}
	return kvevents.SnapshotHeader{
		Version: kvevents.SnapshotVersion, Epoch: s.cfg.Epoch, ReplicaRank: int64(s.cfg.ReplicaRank),
		ResumeSeq: barrier + 1, BarrierSeq: barrier, BarrierID: id, RecordCount: uint64(len(blocks)),
	}, blocks, nil
}

// sendSnapshot sends one answer frame within the replay timeout; a client
// that stops reading gets the rest of its answer dropped.
func (p *Publisher) sendSnapshot(ctx context.Context, id []byte, kind string, payload []byte) bool {
	ctx, cancel := context.WithTimeout(ctx, DefaultReplayTimeout)
	defer cancel()
	if err := p.snap.sock.Send(ctx, [][]byte{id, {}, []byte(kind), payload}); err != nil {
		p.log.Debug("kvstream: snapshot answer cut", "err", err)
		return false
	}
	return true
}
