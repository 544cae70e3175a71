// This file holds Item, what a Subscriber delivers: messages and the stream's signals.

package kvstream

// Item is one element of a Subscriber's output stream: a Message or one of
// the signals Gap, Unrecoverable, Restart and Reconnected. Per key, the
// Messages of the stream have strictly increasing Seq between two Restarts.
type Item interface{ isItem() }

// Message is one batch as the publisher sent it.
type Message struct {
	// Key names the publisher: the topic without SGLang's epoch suffix or a
	// runner shard suffix (PublisherKey) in bind mode, the endpoint in
	// connect mode and with OnePublisher.
	Key string
	// Topic is the live topic frame. Replay frames carry no topic: a
	// replayed batch gets the topic of the live message that opened its
	// gap, which with OnePublisher may be another of the publisher's topics.
	Topic   string
	Seq     uint64
	Payload []byte
	// Replayed is set when the batch came from the replay endpoint.
	Replayed bool
}

// Gap reports the missing sequence numbers From..To (inclusive) of a key.
// A Gap with Healed false opens: until it is resolved the consumer's view
// of the key is incomplete (fail closed). It is resolved, after any replayed
// Messages it covers, by the same Gap with Healed true, or by Unrecoverable
// signals for the parts that could not be recovered.
type Gap struct {
	Key      string
	From, To uint64
	Healed   bool
}

// Unrecoverable reports that the batches From..To of a key are lost for good:
// the consumer must resync the key (snapshot, or clear it) before trusting
// its state again.
type Unrecoverable struct {
	Key      string
	From, To uint64
}

// Restart reports that a key's sequence went backwards (OldSeq was the last
// delivered, NewSeq is the Message that follows): a new publisher process,
// with a fresh and empty cache, whose earlier batches this stream may have
// missed.
type Restart struct {
	Key            string
	OldSeq, NewSeq uint64
}

// Reconnected reports that a connect-mode Subscriber lost its publisher and
// dialed it again, or that the publisher of a OnePublisher bind-mode
// Subscriber is back on a new connection. With Config.CatchUp and a replay
// endpoint, the batches published meanwhile follow at once as replayed
// Messages, without waiting for a live one; otherwise they show up as a Gap
// on the next Message. A publisher that restarted with fewer batches than
// were seen shows a Restart on its next Message; but one whose seq already
// passed the last one seen looks like the same one: the consumer should not
// trust state from before.
type Reconnected struct {
	Endpoint string
}

func (Message) isItem()       {}
func (Gap) isItem()           {}
func (Unrecoverable) isItem() {}
func (Restart) isItem()       {}
func (Reconnected) isItem()   {}
