// Package relay owns the event plane between state agents and routers: the
// subjects an agent republishes its worker's inventory on, the message
// format with the agent's own gap-free cursor, and the snapshot protocol
// that gives a late or lagging router the full inventory and the cursor it
// is consistent with.
//
// One agent publishes one ordered stream: every message carries the
// agent's epoch (a new one per agent start) and a cursor that grows by one
// per message across all of the agent's sources. Each source (worker rank
// or cache owner) has its own subject below the agent's prefix so that a
// consumer can follow one owner alone; ordering still holds because NATS
// keeps one publisher's messages in order for each subscriber.
//
// A message that does not fit the server's max_payload is cut into several,
// each with its own cursor. Every second or so the agent announces the
// cursor it has reached, so that a consumer that lost the stream's last
// messages notices without waiting for a next one.
package relay

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/vmihailenco/msgpack/v5"

	"kvrouter/internal/index"
	"kvrouter/internal/kvevents"
)

// Subject layout below an agent's prefix (discovery.Worker.Events).
const (
	subjectSources  = "src"      // <prefix>.src.w.<rank> | <prefix>.src.o.<owner>
	subjectSnapshot = "snapshot" // request/reply
	subjectCursor   = "cursor"   // heartbeat: KindEnd with the cursor reached
	// MaxChunkOps bounds how many ops one snapshot chunk carries; with
	// index.DumpChunk blocks per op a chunk stays below NATS's 1 MiB
	// default payload limit, and a server with a lower one gets it cut.
	MaxChunkOps = 8
)

// Kind is what a message does to its source.
type Kind uint8

const (
	// KindOps applies ops to the source.
	KindOps Kind = iota + 1
	// KindReset drops everything the source holds and marks it not ready:
	// the agent lost consistency with the engine (unhealable gap, engine
	// restart) and is rebuilding. No hint may name the source until
	// KindReady.
	KindReset
	// KindReady says the source is consistent again.
	KindReady
	// KindGone says the source no longer exists (a worker left for good).
	KindGone
	// KindEnd closes a snapshot; it names no source. Live, on the cursor
	// subject, it is the agent's heartbeat: its cursor is the last one the
	// agent sent, and it takes no cursor of its own.
	KindEnd
)

// ErrMalformed is returned for a message that does not decode.
var ErrMalformed = errors.New("relay: malformed message")

// Message is one entry of an agent's stream.
type Message struct {
	Epoch  uint64       `msgpack:"e"`
	Cursor uint64       `msgpack:"c"`
	Source index.Source `msgpack:"-"`
	Kind   Kind         `msgpack:"k"`
	Ops    []index.Op   `msgpack:"-"`
	// Frame numbers the messages of one snapshot reply, from 0, so that a
	// lost frame is detected; live messages leave it 0.
	Frame int `msgpack:"f,omitempty"`

	WireSource wireSource `msgpack:"s"`
	WireOps    []wireOp   `msgpack:"o,omitempty"`
}

type wireSource struct {
	Worker string `msgpack:"w,omitempty"`
	Rank   int    `msgpack:"r,omitempty"`
	Owner  string `msgpack:"o,omitempty"`
}

type wireOp struct {
	Kind      uint8    `msgpack:"k"`
	Tier      uint8    `msgpack:"t,omitempty"`
	Hashes    []uint64 `msgpack:"h,omitempty"`
	Parent    uint64   `msgpack:"p,omitempty"`
	HasParent bool     `msgpack:"hp,omitempty"`
	Local     []uint64 `msgpack:"l,omitempty"`
	Seqs      []uint64 `msgpack:"s,omitempty"`
	Depths    []uint32 `msgpack:"d,omitempty"`
	BlockSize int      `msgpack:"b,omitempty"`
	AllTiers  bool     `msgpack:"a,omitempty"`
	// SaltUnknown: index.Op.SaltUnknown.
	SaltUnknown bool `msgpack:"su,omitempty"`
}

// Encode serialises m.
func Encode(m Message) ([]byte, error) {
	m.WireSource = wireSource{Worker: m.Source.Worker, Rank: m.Source.Rank, Owner: m.Source.Owner}
	m.WireOps = make([]wireOp, len(m.Ops))
	for i, op := range m.Ops {
		m.WireOps[i] = wireOp{
			Kind: uint8(op.Kind), Tier: uint8(op.Tier), Hashes: op.Hashes, Parent: op.Parent,
			HasParent: op.HasParent, Local: op.Local, Seqs: op.Seqs, Depths: op.Depths,
			BlockSize: op.BlockSize, AllTiers: op.AllTiers, SaltUnknown: op.SaltUnknown,
		}
	}
	return msgpack.Marshal(&m)
}

// Decode parses a message; it never returns a half-filled one.
func Decode(b []byte) (Message, error) {
	var m Message
	if err := msgpack.Unmarshal(b, &m); err != nil {
		return Message{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if m.Kind < KindOps || m.Kind > KindEnd {
		return Message{}, fmt.Errorf("%w: kind %d", ErrMalformed, m.Kind)
	}
	m.Source = index.Source{Worker: m.WireSource.Worker, Rank: m.WireSource.Rank, Owner: m.WireSource.Owner}
	if m.Kind != KindEnd && (m.Source.Worker == "") == (m.Source.Owner == "") {
		return Message{}, fmt.Errorf("%w: source must name exactly one of worker and owner", ErrMalformed)
	}
	m.Ops = make([]index.Op, len(m.WireOps))
	for i, w := range m.WireOps {
		if w.Kind < uint8(index.OpStore) || w.Kind > uint8(index.OpClear) || int(w.Tier) >= index.NumTiers {
			return Message{}, fmt.Errorf("%w: op %d kind %d tier %d", ErrMalformed, i, w.Kind, w.Tier)
		}
		m.Ops[i] = index.Op{
			Kind: index.OpKind(w.Kind), Tier: kvevents.Tier(w.Tier), Hashes: w.Hashes, Parent: w.Parent,
			HasParent: w.HasParent, Local: w.Local, Seqs: w.Seqs, Depths: w.Depths,
			BlockSize: w.BlockSize, AllTiers: w.AllTiers, SaltUnknown: w.SaltUnknown,
		}
	}
	m.WireOps, m.WireSource = nil, wireSource{}
	return m, nil
}

// SourceSubject is the subject of one source's messages below prefix.
func SourceSubject(prefix string, s index.Source) string {
	if s.IsOwner() {
		return prefix + "." + subjectSources + ".o." + token(s.Owner)
	}
	return prefix + "." + subjectSources + ".w." + strconv.Itoa(s.Rank)
}

// AllSources is the wildcard subject of every source of an agent.
func AllSources(prefix string) string { return prefix + "." + subjectSources + ".>" }

// SnapshotSubject is where an agent answers snapshot requests.
func SnapshotSubject(prefix string) string { return prefix + "." + subjectSnapshot }

// CursorSubject is where an agent's heartbeat goes. It lies outside
// AllSources so that a consumer built before heartbeats existed never sees
// one: it would take a heartbeat one past its cursor for the message it
// lost.
func CursorSubject(prefix string) string { return prefix + "." + subjectCursor }

// Prefix builds an agent's subject prefix from a worker id, mapping
// characters NATS subjects cannot carry.
func Prefix(workerID string) string {
	return "kvrouter.ev." + token(workerID)
}

// token maps s onto one NATS subject token.
func token(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '.', '*', '>', ' ', '\t', '\n', '\r':
			b.WriteByte('_')
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
