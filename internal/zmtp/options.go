// This file holds a Socket's options, with their defaults, and what Recv returns.

package zmtp

import (
	"log/slog"
	"time"
)

// Defaults of Options.
const (
	DefaultMaxMsgSize       = 16 << 20
	DefaultMaxFrames        = 64
	DefaultMaxSubscriptions = 1024
	DefaultMaxPeers         = 1024
	DefaultHandshakeTimeout = 5 * time.Second
	DefaultDialTimeout      = 5 * time.Second
	DefaultWriteTimeout     = 10 * time.Second
	DefaultSendHWM          = 1000
	DefaultRecvHWM          = 1000
	// DefaultHeartbeatTimeouts is HeartbeatTimeout in Heartbeat intervals.
	DefaultHeartbeatTimeouts = 3
	defaultReconnectMin      = 100 * time.Millisecond
	defaultReconnectMax      = 5 * time.Second
)

// Options configure a Socket. Zero fields take the defaults.
type Options struct {
	// MaxMsgSize bounds a message's bytes, all frames together.
	MaxMsgSize int64
	// MaxFrames bounds a message's frames.
	MaxFrames int
	// MaxSubscriptions bounds the distinct prefixes a SUB peer of a PUB
	// may subscribe.
	MaxSubscriptions int
	// MaxPeers bounds a socket's incoming connections, handshaking or not.
	MaxPeers int
	// HandshakeTimeout bounds the greeting and READY exchange.
	HandshakeTimeout time.Duration
	// DialTimeout bounds one connect attempt.
	DialTimeout time.Duration
	// WriteTimeout: a peer that accepts no byte for this long is dropped.
	WriteTimeout time.Duration
	// SendHWM bounds the messages queued for one peer.
	SendHWM int
	// RecvHWM bounds the messages received and not yet taken by Recv.
	RecvHWM int
	// Heartbeat, if positive, sends a PING every Heartbeat to each peer
	// that speaks ZMTP 3.1 and drops one that sends nothing for
	// HeartbeatTimeout (default DefaultHeartbeatTimeouts intervals).
	Heartbeat        time.Duration
	HeartbeatTimeout time.Duration
	// ReconnectDelay is the wait before redial number attempt (0 for the
	// first) of a Connect; default 100 ms doubling up to 5 s.
	ReconnectDelay func(attempt int) time.Duration
	// Identity goes in the READY of a ROUTER or DEALER (a ROUTER peer
	// routes to us by it); empty lets the peer choose.
	Identity []byte
	// Events delivers EventConnected and EventDisconnected through Recv,
	// in order with the messages of the connection.
	Events bool
	// Counters, if set, is where the socket counts (several sockets may
	// share it); otherwise the socket has its own.
	Counters *Counters
	Logger   *slog.Logger
}

func (o *Options) defaults() {
	if o.MaxMsgSize <= 0 {
		o.MaxMsgSize = DefaultMaxMsgSize
	}
	if o.MaxFrames <= 0 {
		o.MaxFrames = DefaultMaxFrames
	}
	if o.MaxSubscriptions <= 0 {
		o.MaxSubscriptions = DefaultMaxSubscriptions
	}
	if o.MaxPeers <= 0 {
		o.MaxPeers = DefaultMaxPeers
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.SendHWM <= 0 {
		o.SendHWM = DefaultSendHWM
	}
	if o.RecvHWM <= 0 {
		o.RecvHWM = DefaultRecvHWM
	}
	if o.Heartbeat > 0 && o.HeartbeatTimeout <= 0 {
		o.HeartbeatTimeout = DefaultHeartbeatTimeouts * o.Heartbeat
	}
	if o.ReconnectDelay == nil {
		o.ReconnectDelay = func(attempt int) time.Duration {
			d := defaultReconnectMin
			for i := 0; i < attempt && d < defaultReconnectMax; i++ {
				d *= 2
			}
			return min(d, defaultReconnectMax)
		}
	}
	if o.Counters == nil {
		o.Counters = new(Counters)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Event says what a Msg from Recv is.
type Event uint8

const (
	// EventMessage: Frames holds a message.
	EventMessage Event = iota
	// EventConnected: connection Peer completed its handshake; its
	// messages follow.
	EventConnected
	// EventDisconnected: connection Peer ended, after its last message;
	// Err says why.
	EventDisconnected
)

// Msg is what Recv returns.
type Msg struct {
	// Frames of a message. A ROUTER puts the sender's identity first.
	Frames [][]byte
	// Peer numbers the connection it came from, from 1, per socket.
	Peer  uint64
	Event Event
	Err   error
}
