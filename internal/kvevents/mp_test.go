package kvevents

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// mp is a msgpack value built by hand in tests, so that each case states
// the exact wire shape it feeds the decoder (which encoding of an int, which
// key order) rather than trusting an encoder's choices.
type mp []byte

func cat(vs []mp) mp {
	var out mp
	for _, v := range vs {
		out = append(out, v...)
	}
	return out
}

// enc writes one value with the msgpack library, whose integers take the
// shortest form, as msgpack-python's do.
func enc(write func(*msgpack.Encoder) error) mp {
	var b bytes.Buffer
	if err := write(msgpack.NewEncoder(&b)); err != nil {
		panic(err)
	}
	return b.Bytes()
}

func arr(items ...mp) mp {
	return append(enc(func(e *msgpack.Encoder) error { return e.EncodeArrayLen(len(items)) }), cat(items)...)
}

// obj builds a map from alternating keys and values.
func obj(kv ...mp) mp {
	return append(enc(func(e *msgpack.Encoder) error { return e.EncodeMapLen(len(kv) / 2) }), cat(kv)...)
}

func str(s string) mp  { return enc(func(e *msgpack.Encoder) error { return e.EncodeString(s) }) }
func uv(v uint64) mp   { return enc(func(e *msgpack.Encoder) error { return e.EncodeUint(v) }) }
func iv(v int64) mp    { return enc(func(e *msgpack.Encoder) error { return e.EncodeInt(v) }) }
func f64(v float64) mp { return enc(func(e *msgpack.Encoder) error { return e.EncodeFloat64(v) }) }

var null = mp{0xc0}

// u64 forces the 9-byte unsigned form, i64 the 9-byte signed one.
func u64(v uint64) mp { return binary.BigEndian.AppendUint64(mp{0xcf}, v) }
func i64(v int64) mp  { return binary.BigEndian.AppendUint64(mp{0xd3}, uint64(v)) }

// u32 forces the 5-byte unsigned form (`ce`), as the captures send tokens.
func u32(v uint32) mp { return binary.BigEndian.AppendUint32(mp{0xce}, v) }

func bin(b []byte) mp { return append(mp{0xc4, byte(len(b))}, b...) }

func raw(tb testing.TB, h string) mp {
	tb.Helper()
	b, err := hex.DecodeString(h)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// batch wraps events in the current 3-element envelope, ts 1700000000.5,
// rank 0.
func batch(events ...mp) []byte {
	return arr(f64(1700000000.5), arr(events...), uv(0))
}

// kv is shorthand for a key/value pair inside obj.
func kv(k string, v mp) []mp { return []mp{str(k), v} }

func fields(pairs ...[]mp) []mp {
	var out []mp
	for _, p := range pairs {
		out = append(out, p...)
	}
	return out
}
