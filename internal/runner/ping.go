// This file holds the liveness probe of a runner's control endpoint: PING, answered with the runner's start epoch.

package runner

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"
)

// errPinged ends a connection that asked for the epoch only.
var errPinged = errors.New("answered a ping")

// newEpoch returns a random nonzero epoch.
func newEpoch() uint64 {
	var b [epochLen]byte
	for {
		rand.Read(b[:]) // never fails on supported platforms (it panics otherwise)
		if e := binary.BigEndian.Uint64(b[:]); e != 0 {
			return e
		}
	}
}

func appendPong(b []byte, epoch uint64) []byte {
	return binary.BigEndian.AppendUint64(appendHeader(b, msgPong, epochLen), epoch)
}

// Ping asks the runner at endpoint (tcp://host:port) for its start epoch,
// within timeout. It needs no secret: a runner's epoch says only that it
// lives and whether it is the one seen before. An error means the runner
// did not answer (or is not one); a busy runner's refusal is an error
// wrapping ErrPeerBusy, though it shows the runner alive.
func Ping(ctx context.Context, endpoint string, timeout time.Duration) (uint64, error) {
	addr, err := parseEndpoint(endpoint)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, fmt.Errorf("runner: ping %s: %w", endpoint, err)
	}
	defer conn.Close()
	dl, _ := ctx.Deadline()
	conn.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(aLongTimeAgo) })
	defer stop()
	if _, err := conn.Write(appendHeader(nil, msgPing, 0)); err != nil {
		return 0, fmt.Errorf("runner: ping %s: %w", endpoint, err)
	}
	p, err := readFrame(conn, msgPong, 0)
	if err != nil {
		return 0, fmt.Errorf("runner: ping %s: %w", endpoint, ctxErr(ctx, err))
	}
	return binary.BigEndian.Uint64(p), nil
}
