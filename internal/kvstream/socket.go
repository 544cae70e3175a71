// This file holds the ZMTP socket settings kvstream's sockets share.

package kvstream

import (
	"log/slog"
	"time"

	"kvrouter/internal/zmtp"
)

// DefaultDialTimeout bounds one TCP connect attempt.
const DefaultDialTimeout = 5 * time.Second

// DefaultMaxMessageSize is Limits.MaxMessageSize unless set: twice
// kvevents.DefaultMaxPayload, so that a payload the decoder would refuse
// still reaches it (and is reported there) rather than cutting the stream.
const DefaultMaxMessageSize = zmtp.DefaultMaxMsgSize

// Limits bound what a peer can make a socket hold; zero fields take the
// zmtp defaults (see package zmtp).
type Limits struct {
	// MaxMessageSize bounds a message's bytes, all frames together (like
	// libzmq's ZMQ_MAXMSGSIZE): a peer announcing more is dropped and
	// counted in Oversize, before anything is allocated for it. Default
	// DefaultMaxMessageSize.
	MaxMessageSize int64
	// MaxPeers bounds a bound socket's connections; more are refused and
	// counted in PeersRefused.
	MaxPeers int
	// HandshakeTimeout bounds a connection's ZMTP greeting and READY.
	HandshakeTimeout time.Duration
	// Heartbeat, if positive, pings ZMTP 3.1 peers that often and drops
	// one silent for three intervals (counted in HeartbeatTimeouts), so
	// that a peer gone without closing its connection is noticed. Off by
	// default.
	Heartbeat time.Duration
}

// socketOptions are the zmtp options of every socket here. Redials are
// spaced by b, the schedule the project owns.
func socketOptions(log *slog.Logger, dialTimeout time.Duration, lim Limits, b Backoff, cnt *zmtp.Counters) zmtp.Options {
	if dialTimeout <= 0 {
		dialTimeout = DefaultDialTimeout
	}
	return zmtp.Options{
		MaxMsgSize:       lim.MaxMessageSize,
		MaxPeers:         lim.MaxPeers,
		HandshakeTimeout: lim.HandshakeTimeout,
		Heartbeat:        lim.Heartbeat,
		DialTimeout:      dialTimeout,
		ReconnectDelay:   b.Delay,
		Counters:         cnt,
		Logger:           log,
	}
}
