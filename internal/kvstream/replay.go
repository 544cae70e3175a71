// This file holds the replay client: one DEALER exchange per gap.

package kvstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"kvrouter/internal/zmtp"
)

// DefaultReplayTimeout bounds one replay exchange. A publisher gives no
// answer to a request it finds malformed, so only a timeout ends the wait.
const DefaultReplayTimeout = 5 * time.Second

// fetchReplay asks the replay endpoint for every buffered batch with
// seq >= from. It returns what arrived, whether the end marker arrived,
// and the malformed replies skipped.
func fetchReplay(ctx context.Context, endpoint string, from uint64, timeout time.Duration, opts zmtp.Options, log *slog.Logger) (msgs []Message, complete bool, dropped drops, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// One attempt: the replay timeout is the budget, and a lost
	// connection ends the exchange (its event says so).
	opts.Events = true
	d, err := zmtp.New(zmtp.Dealer, opts)
	if err != nil {
		return nil, false, dropped, err
	}
	defer d.Close()
	if err := d.Dial(ctx, endpoint); err != nil {
		return nil, false, dropped, fmt.Errorf("kvstream: replay dial %s: %w", endpoint, err)
	}
	if err := d.Send(ctx, EncodeReplayRequest(from)); err != nil {
		return nil, false, dropped, fmt.Errorf("kvstream: replay request to %s: %w", endpoint, err)
	}
	for {
		m, err := d.Recv(ctx)
		if err == nil && m.Event == zmtp.EventDisconnected {
			err = fmt.Errorf("connection lost: %w", m.Err)
		}
		if err != nil {
			return msgs, false, dropped, fmt.Errorf("kvstream: replay from %s after %d batches: %w", endpoint, len(msgs), err)
		}
		if m.Event != zmtp.EventMessage {
			continue
		}
		seq, payload, end, err := ParseReplayReply(m.Frames)
		if err != nil {
			dropped.add(err)
			log.Debug("kvstream: dropped replay reply", "endpoint", endpoint, "err", err)
			continue
		}
		if end {
			return msgs, true, dropped, nil
		}
		msgs = append(msgs, Message{Seq: seq, Payload: payload})
	}
}

// drops counts dropped messages by what was wrong with them.
type drops struct {
	frameCount, seqLength, delimiter uint64
	first                            error // the first one's error
}

func (d *drops) add(err error) {
	if d.first == nil {
		d.first = err
	}
	switch {
	case errors.Is(err, ErrFrameCount):
		d.frameCount++
	case errors.Is(err, ErrSeqLength):
		d.seqLength++
	case errors.Is(err, ErrDelimiter):
		d.delimiter++
	}
}

func (d drops) total() uint64 { return d.frameCount + d.seqLength + d.delimiter }
