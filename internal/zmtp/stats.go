// This file holds the socket counters.

package zmtp

import "sync/atomic"

// Counters are the counters of one or more sockets (Options.Counters lets
// several sockets share them). The zero value is ready to use.
type Counters struct {
	connections, disconnects, dialFailures, refused, handshakeFailures atomic.Uint64
	oversize, protocolErrors, stalled, heartbeatTimeouts, sendDropped  atomic.Uint64
}

// Stats are a snapshot of Counters.
type Stats struct {
	Connections       uint64 // handshakes completed, either direction
	Disconnects       uint64 // handshaken connections that ended
	DialFailures      uint64 // connect attempts that failed before the handshake
	Refused           uint64 // incoming connections closed at once: MaxPeers reached
	HandshakeFailures uint64 // connections dropped in the handshake (bad greeting, mechanism, READY, socket type, identity, deadline)
	Oversize          uint64 // connections dropped: a message or command over the limits (MaxMsgSize, MaxFrames)
	ProtocolErrors    uint64 // connections dropped: malformed traffic after the handshake
	Stalled           uint64 // peers dropped: no byte written within WriteTimeout
	HeartbeatTimeouts uint64 // peers dropped: nothing received within HeartbeatTimeout
	SendDropped       uint64 // messages a PUB dropped for a peer at its SendHWM
}

// Snapshot reads the counters.
func (c *Counters) Snapshot() Stats {
	return Stats{
		Connections:       c.connections.Load(),
		Disconnects:       c.disconnects.Load(),
		DialFailures:      c.dialFailures.Load(),
		Refused:           c.refused.Load(),
		HandshakeFailures: c.handshakeFailures.Load(),
		Oversize:          c.oversize.Load(),
		ProtocolErrors:    c.protocolErrors.Load(),
		Stalled:           c.stalled.Load(),
		HeartbeatTimeouts: c.heartbeatTimeouts.Load(),
		SendDropped:       c.sendDropped.Load(),
	}
}
