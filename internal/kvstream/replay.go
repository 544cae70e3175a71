package kvstream

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-zeromq/zmq4"
)

// DefaultReplayTimeout bounds one replay exchange. A publisher gives no
// answer to a request it finds malformed, so only a timeout ends the wait.
const DefaultReplayTimeout = 5 * time.Second

// fetchReplay asks the replay endpoint for every buffered batch with
// seq >= from. It returns what arrived, whether the end marker arrived, and
// the number of malformed replies skipped.
func fetchReplay(ctx context.Context, endpoint string, from uint64, timeout time.Duration, opts []zmq4.Option, log *slog.Logger) (msgs []Message, complete bool, malformed int, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	d := zmq4.NewDealer(ctx, opts...)
	defer func() {
		_ = d.Close()
		drain(d)
	}()
	if err := d.Dial(endpoint); err != nil {
		return nil, false, 0, fmt.Errorf("kvstream: replay dial %s: %w", endpoint, err)
	}
	if err := d.Send(zmq4.NewMsgFrom(EncodeReplayRequest(from)...)); err != nil {
		return nil, false, 0, fmt.Errorf("kvstream: replay request to %s: %w", endpoint, err)
	}
	for {
		m, err := d.Recv()
		if err != nil {
			return msgs, false, malformed, fmt.Errorf("kvstream: replay from %s after %d batches: %w", endpoint, len(msgs), err)
		}
		if m.Type == zmq4.CmdMsg {
			continue
		}
		seq, payload, end, err := ParseReplayReply(m.Frames)
		if err != nil {
			malformed++
			log.Debug("kvstream: dropped replay reply", "endpoint", endpoint, "err", err)
			continue
		}
		if end {
			return msgs, true, malformed, nil
		}
		msgs = append(msgs, Message{Seq: seq, Payload: payload})
	}
}
