// This file holds the splitting of a message too large for the NATS payload limit.

package relay

import (
	"fmt"
	"math"

	"github.com/nats-io/nats.go"

	"kvrouter/internal/index"
)

// defaultMaxPayload is NATS's own default, for a connection that has not
// heard the server's limit.
const defaultMaxPayload = 1 << 20

// encodeWithin encodes m as one message or, when that exceeds limit bytes,
// as several whose ops applied in order change the source exactly as m's
// would. stamp sets the i-th message's cursor or frame before it is
// encoded; the common single message is encoded once.
func encodeWithin(m Message, limit int, stamp func(m *Message, i int)) ([][]byte, error) {
	one := m
	stamp(&one, 0)
	b, err := Encode(one)
	if err != nil {
		return nil, fmt.Errorf("relay: encode: %w", err)
	}
	if len(b) <= limit {
		return [][]byte{b}, nil
	}
	parts, err := split(m, limit)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(parts))
	for i := range parts {
		stamp(&parts[i], i)
		if out[i], err = Encode(parts[i]); err != nil {
			return nil, fmt.Errorf("relay: encode: %w", err)
		}
	}
	return out, nil
}

// split cuts m's ops into messages that each encode within limit bytes
// whatever cursor and frame they are given later.
func split(m Message, limit int) ([]Message, error) {
	worst := m
	worst.Cursor, worst.Frame = math.MaxUint64, math.MaxInt
	var out []Message
	var cut func(ops []index.Op) error
	cut = func(ops []index.Op) error {
		worst.Ops = ops
		b, err := Encode(worst)
		if err != nil {
			return fmt.Errorf("relay: encode: %w", err)
		}
		if len(b) <= limit {
			part := m
			part.Ops = ops
			out = append(out, part)
			return nil
		}
		a, z, ok := halve(ops)
		if !ok {
			return fmt.Errorf("relay: a %d-byte message of %s cannot be cut to fit: %w (%d bytes; raise the server's max_payload)",
				len(b), m.Source, nats.ErrMaxPayload, limit)
		}
		if err := cut(a); err != nil {
			return err
		}
		return cut(z)
	}
	if err := cut(m.Ops); err != nil {
		return nil, err
	}
	return out, nil
}

// halve cuts ops in two, between ops when there are several, else inside
// the one op's blocks. The second half of a parent-linked store hangs
// under the first half's last block, which gives its blocks the same
// identities and depths as the whole store would.
func halve(ops []index.Op) (a, z []index.Op, ok bool) {
	if len(ops) > 1 {
		mid := len(ops) / 2
		return ops[:mid], ops[mid:], true
	}
	if len(ops) == 0 {
		return nil, nil, false
	}
	op := ops[0]
	n := len(op.Hashes)
	if n < 2 {
		return nil, nil, false
	}
	mid := n / 2
	x, y := op, op
	x.Hashes, y.Hashes = op.Hashes[:mid], op.Hashes[mid:]
	switch {
	case op.Kind == index.OpRemove:
	case op.Kind != index.OpStore:
		return nil, nil, false
	case op.Seqs != nil:
		if len(op.Seqs) != n || len(op.Depths) != n {
			return nil, nil, false
		}
		x.Seqs, y.Seqs = op.Seqs[:mid], op.Seqs[mid:]
		x.Depths, y.Depths = op.Depths[:mid], op.Depths[mid:]
	default:
		if len(op.Local) != n {
			return nil, nil, false
		}
		x.Local, y.Local = op.Local[:mid], op.Local[mid:]
		y.Parent, y.HasParent = op.Hashes[mid-1], true
	}
	return []index.Op{x}, []index.Op{y}, true
}
