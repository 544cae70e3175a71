// Package kvstream moves engine KV-event frames over ZMQ: a Subscriber that
// reads [topic, seq, payload] messages from vLLM/SGLang publishers (or from
// our simulated engine's Publisher), tracks sequence numbers per publisher,
// heals gaps through the publisher's replay endpoint, reconnects on its own,
// and catches up from the replay endpoint at once (the history at the first
// connection, what was missed at a reconnect) since an idle publisher sends
// nothing that would reveal a gap; and a Publisher that stamps sequence
// numbers and answers replay requests from a ring buffer.
//
// Payloads are opaque here: decoding them is kvevents' job.
//
// The sequence rules live in Tracker, a pure state machine; Subscriber is the
// I/O shell around it. The ZMQ wire protocol is package zmtp's, with its
// limits (Limits): a peer cannot make a socket allocate more than it sends,
// hold it past a handshake deadline, or block a Publisher. Redials follow
// our Backoff. Every message dropped, and every connection dropped for what
// it sent, is counted (Stats, PublisherStats).
package kvstream
