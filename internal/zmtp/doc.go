// Package zmtp is a small ZMTP 3.x implementation (RFC 23/ZMTP 3.0 and
// RFC 37/ZMTP 3.1) for the engine KV-event transport: PUB and SUB sockets
// for the live stream and ROUTER and DEALER sockets for replay, over tcp://,
// ipc:// (Unix sockets) and inproc:// (in-process pipes).
//
// It implements: the greeting with version negotiation (it speaks 3.1 and
// falls back to 3.0 with a peer that announces 3.0), the NULL mechanism
// (a READY command carrying the Socket-Type and Identity properties, peer
// socket types checked as the RFCs pair them), short and long frames with
// the MORE and COMMAND flags, subscriptions in both forms (a 3.0 message
// whose first byte is 1 or 0, and the 3.1 SUBSCRIBE and CANCEL commands;
// each peer is sent the form its version knows), prefix filtering on the
// PUB side (and again on the SUB side), answers to PING with PONG, and an
// optional heartbeat (Options.Heartbeat) towards 3.1 peers.
//
// It deliberately does not implement the CURVE and PLAIN mechanisms, ZMTP
// 1.0/2.0 peers, socket types other than PUB, SUB, ROUTER and DEALER
// (XPUB/XSUB, REQ and REP peers are accepted where the RFCs pair them with
// ours, but we do not offer those types), ROUTER_MANDATORY/HANDOVER, nor
// the TTL of a received PING.
//
// Every peer is a stranger until proven otherwise. Limits, with their
// defaults (Options):
//   - MaxMsgSize (16 MiB), like libzmq's ZMQ_MAXMSGSIZE but over the whole
//     message: a frame header announcing more than what is left of it is a
//     protocol error that drops the connection, counted in Oversize, before
//     any byte of the body is read or allocated. Bodies are read into
//     buffers that grow as bytes arrive (to at most twice those received
//     plus 32 KiB), so announcing a size costs the announcer the bytes it
//     sends.
//   - MaxFrames (64) per message, MaxSubscriptions (1024) per peer, and
//     commands of at most 64 KiB: past them the connection is dropped.
//   - HandshakeTimeout (5 s): greeting and READY, both ways, within it.
//   - MaxPeers (1024) per socket, handshaking connections included; more
//     are closed at once, counted in Refused.
//   - SendHWM (1000 messages) per peer, in a queue that grows only as
//     messages are queued. A PUB never blocks: at the limit the message is
//     dropped for that peer and counted in SendDropped, as ZMQ PUB does. A
//     ROUTER or DEALER Send waits for room until its context ends.
//   - WriteTimeout (10 s): a peer that accepts no bytes for that long is
//     dropped and counted in Stalled, so a dead subscriber releases its
//     queue and goroutines.
//   - RecvHWM (1000 messages) per socket: past it the readers stop reading
//     and TCP pushes back on the peers.
//
// Connecting sockets either Dial once (synchronously, handshake included)
// or Connect, which redials in the background after Options.ReconnectDelay
// whenever the connection fails or ends. Close stops every goroutine a
// socket started and closes every connection before it returns.
package zmtp
