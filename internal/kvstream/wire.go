// This file holds the wire shapes of live, replay request and replay reply messages.

package kvstream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

	"kvrouter/internal/kvevents"
)

// Wire facts of the engine event transport (docs/wire.md §2).
const (
	// seqLen is the size of the sequence frame: unsigned big-endian u64.
	seqLen = 8
	// endSeq marks the end of a replay answer.
	endSeq uint64 = math.MaxUint64
	// epochSep starts SGLang's optional epoch suffix on a live topic frame:
	// topic + "\x00sgl-kv-epoch=" + epoch.
	epochSep = "\x00sgl-kv-epoch="
	// liveFrames is the frame count of a live message: topic, seq, payload.
	liveFrames = 3
	// requestFrames is a replay request after the ROUTER identity: "", seq.
	requestFrames = 2
	// replyFrames is a replay answer as the DEALER sees it: "" (or a
	// topic), seq, payload; some publishers put a topic after the "".
	replyFrames = 3

	// Endpoint schemes, and the suffix an ipc/inproc endpoint gets per DP rank.
	schemeTCP    = "tcp://"
	schemeIPC    = "ipc://"
	schemeInproc = "inproc://"
	rankSuffix   = "_dp"
	maxPort      = 65535
)

// ErrMalformed is wrapped by every parse error: the frames do not have the
// shape docs/wire.md §2.3–2.4 prescribes. The errors below say how, and wrap it.
var ErrMalformed = errors.New("kvstream: malformed frames")

var (
	// ErrFrameCount: the message has the wrong number of frames.
	ErrFrameCount = fmt.Errorf("%w: wrong frame count", ErrMalformed)
	// ErrSeqLength: the seq frame is not 8 bytes.
	ErrSeqLength = fmt.Errorf("%w: bad seq length", ErrMalformed)
	// ErrDelimiter: the empty delimiter frame of a replay message is not
	// empty.
	ErrDelimiter = fmt.Errorf("%w: bad delimiter", ErrMalformed)
)

// ParseMessage parses a live message [topic, seq (8 bytes BE), payload].
// The returned slices alias frames.
func ParseMessage(frames [][]byte) (topic []byte, seq uint64, payload []byte, err error) {
	if len(frames) != liveFrames {
		return nil, 0, nil, fmt.Errorf("%w: live message has %d frames, want %d (topic, seq, payload)", ErrFrameCount, len(frames), liveFrames)
	}
	if len(frames[1]) != seqLen {
		return nil, 0, nil, fmt.Errorf("%w: seq frame is %d bytes, want %d", ErrSeqLength, len(frames[1]), seqLen)
	}
	return frames[0], binary.BigEndian.Uint64(frames[1]), frames[2], nil
}

// EncodeMessage builds the frames of a live message.
func EncodeMessage(topic string, seq uint64, payload []byte) [][]byte {
	return [][]byte{[]byte(topic), binary.BigEndian.AppendUint64(make([]byte, 0, seqLen), seq), payload}
}

// ParseReplayRequest parses a replay request as the ROUTER sees it once the
// peer identity frame is removed: ["", start_seq (8 bytes BE)].
func ParseReplayRequest(frames [][]byte) (start uint64, err error) {
	if len(frames) != requestFrames {
		return 0, fmt.Errorf("%w: replay request has %d frames, want %d (empty delimiter, start seq)", ErrFrameCount, len(frames), requestFrames)
	}
	if len(frames[0]) != 0 {
		return 0, fmt.Errorf("%w: replay request delimiter frame is %d bytes, want empty", ErrDelimiter, len(frames[0]))
	}
	if len(frames[1]) != seqLen {
		return 0, fmt.Errorf("%w: replay start seq is %d bytes, want %d", ErrSeqLength, len(frames[1]), seqLen)
	}
	return binary.BigEndian.Uint64(frames[1]), nil
}

// EncodeReplayRequest builds the frames a DEALER sends to ask for every
// buffered batch with seq >= start.
func EncodeReplayRequest(start uint64) [][]byte {
	return [][]byte{{}, binary.BigEndian.AppendUint64(make([]byte, 0, seqLen), start)}
}

// ParseReplayReply parses one replay answer as the DEALER sees it.
// Publishers in the wild frame it three ways, all accepted: vLLM's (SPEC
// 2.1) ["", seq (8 bytes BE), payload], [topic, seq, payload], and
// ["", topic, seq, payload]. end reports the end marker (seq all ones); its
// payload, empty on the wire, is ignored. A topic frame is not returned: a
// replayed batch belongs to the stream whose gap asked for it.
func ParseReplayReply(frames [][]byte) (seq uint64, payload []byte, end bool, err error) {
	switch len(frames) {
	case replyFrames:
		// The first frame is the empty delimiter or a topic: either way
		// the seq and payload follow.
	case replyFrames + 1:
		if len(frames[0]) != 0 {
			return 0, nil, false, fmt.Errorf("%w: replay reply of %d frames: delimiter frame is %d bytes, want empty (\"\", topic, seq, payload)",
				ErrDelimiter, len(frames), len(frames[0]))
		}
		frames = frames[1:]
	default:
		return 0, nil, false, fmt.Errorf("%w: replay reply has %d frames, want %d (empty delimiter or topic, seq, payload) or %d (empty delimiter, topic, seq, payload)",
			ErrFrameCount, len(frames), replyFrames, replyFrames+1)
	}
	if len(frames[1]) != seqLen {
		return 0, nil, false, fmt.Errorf("%w: replay reply seq is %d bytes, want %d", ErrSeqLength, len(frames[1]), seqLen)
	}
	seq = binary.BigEndian.Uint64(frames[1])
	if seq == endSeq {
		return seq, nil, true, nil
	}
	return seq, frames[2], false, nil
}

// EncodeReplayReply builds one replay answer (without the ROUTER identity).
func EncodeReplayReply(seq uint64, payload []byte) [][]byte {
	return [][]byte{{}, binary.BigEndian.AppendUint64(make([]byte, 0, seqLen), seq), payload}
}

// EncodeReplayEnd builds the end marker of a replay answer.
func EncodeReplayEnd() [][]byte {
	return EncodeReplayReply(endSeq, []byte{})
}

// TopicKey is a live topic without SGLang's epoch suffix (and whatever
// follows it), so that a new epoch of the same publisher is seen as a restart
// of one stream rather than a new stream.
func TopicKey(topic string) string {
	if i := strings.Index(topic, epochSep); i >= 0 {
		return topic[:i]
	}
	return topic
}

// TopicEpoch is SGLang's epoch suffix of a live topic, "" for none: the
// part TopicKey strips, without a runner shard suffix after it. A new epoch
// is a new publisher process.
func TopicEpoch(topic string) string {
	base, _, _ := kvevents.ParseRunnerShardTopic(topic)
	// A snapshot barrier's topic names the barrier after the epoch.
	base, _, _ = strings.Cut(base, snapshotSep)
	return base[len(TopicKey(base)):]
}

// PublisherKey is the publisher key of a live topic in bind mode with several
// publishers: the engine's topic without its epoch suffix (TopicKey) nor the
// runner shard suffix (kvevents.RunnerShardTopic) a TP > 1 kvrouter engine
// appends to it, after any epoch suffix. The shards' topics share the
// engine's one seq counter: tracked apart, each would see the others'
// batches as gaps.
func PublisherKey(topic string) string {
	// The shard suffix comes last: off first, as the agent takes it.
	base, _, _ := kvevents.ParseRunnerShardTopic(topic)
	return TopicKey(base)
}
