package kvstream

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/go-zeromq/zmq4"
)

// DefaultDialTimeout bounds one TCP connect attempt.
const DefaultDialTimeout = 5 * time.Second

// drainQuiet is how many consecutive empty receives end a drain (see
// closeSocket).
const drainQuiet = 32

// socketOptions makes every dial a single attempt: zmq4's own retries sleep
// without watching cancellation and its auto-reconnect has had a data race,
// so retrying is left to our backoff loops.
func socketOptions(log *slog.Logger, dialTimeout time.Duration) []zmq4.Option {
	if dialTimeout <= 0 {
		dialTimeout = DefaultDialTimeout
	}
	return []zmq4.Option{
		zmq4.WithAutomaticReconnect(false),
		zmq4.WithDialerMaxRetries(0),
		zmq4.WithDialerTimeout(dialTimeout),
		zmq4.WithLogger(slog.NewLogLogger(log.Handler(), slog.LevelDebug)),
	}
}

// drain empties a closed socket's receive queue. zmq4 reads each connection
// in a goroutine that blocks on a full queue without watching cancellation;
// emptying the queue lets it run into the closed connection and exit. Recv
// on a closed socket picks at random between the queue and the cancellation,
// so only a run of empty receives says the queue is empty.
func drain(s zmq4.Socket) {
	for quiet := 0; quiet < drainQuiet; {
		if _, err := s.Recv(); err != nil {
			quiet++
		} else {
			quiet = 0
		}
	}
}

// canceled reports whether err means the socket (or its context) is done.
func canceled(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
