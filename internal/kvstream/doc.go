// Package kvstream moves engine KV-event frames over ZMQ: a Subscriber that
// reads [topic, seq, payload] messages from vLLM/SGLang publishers (or from
// our simulated engine's Publisher), tracks sequence numbers per publisher,
// heals gaps through the publisher's replay endpoint, and reconnects on its
// own; and a Publisher that stamps sequence numbers and answers replay
// requests from a ring buffer.
//
// Payloads are opaque here: decoding them is kvevents' job.
//
// The sequence rules live in Tracker, a pure state machine; Subscriber is the
// I/O shell around it. go-zeromq/zmq4's own reconnect is disabled (it has had
// a data race and its Dial retries sleep without regard to cancellation), so
// every dial here is a single attempt and retries are ours.
package kvstream
