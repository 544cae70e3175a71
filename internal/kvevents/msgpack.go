// This file holds the msgpack reader: typed reads and skips over one payload, no reflection.

package kvevents

import (
	"encoding/binary"
	"fmt"
	"math"
)

// reader is a zero-reflection msgpack reader over one payload. Reflection
// and interface{} decoding cost allocations per value; events arrive by the
// million, so every read here returns plain values or views into b.
//
// Every length read is checked against the bytes left before anything is
// allocated from it, so a hostile length cannot make the decoder allocate
// more than the payload could hold.
type reader struct {
	b   []byte
	pos int
}

func (r *reader) left() int { return len(r.b) - r.pos }

// peek returns the next type byte without consuming it.
func (r *reader) peek() (byte, error) {
	if r.pos >= len(r.b) {
		return 0, ErrTruncated
	}
	return r.b[r.pos], nil
}

// next consumes n bytes.
func (r *reader) next(n int) ([]byte, error) {
	if n < 0 || n > r.left() {
		return nil, ErrTruncated
	}
	p := r.b[r.pos : r.pos+n]
	r.pos += n
	return p, nil
}

// nil consumes a nil if one is next.
func (r *reader) nil() bool {
	if r.pos < len(r.b) && r.b[r.pos] == 0xc0 {
		r.pos++
		return true
	}
	return false
}

// size reads a big-endian length of w bytes (1, 2 or 4).
func (r *reader) size(w int) (int, error) {
	p, err := r.next(w)
	if err != nil {
		return 0, err
	}
	switch w {
	case 1:
		return int(p[0]), nil
	case 2:
		return int(binary.BigEndian.Uint16(p)), nil
	}
	return int(binary.BigEndian.Uint32(p)), nil
}

// arrayLen reads an array header. Each element takes at least one byte, so
// a count beyond the bytes left is a truncation.
func (r *reader) arrayLen() (int, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	var n int
	switch {
	case c&0xf0 == 0x90:
		r.pos++
		n = int(c & 0x0f)
	case c == 0xdc:
		r.pos++
		n, err = r.size(2)
	case c == 0xdd:
		r.pos++
		n, err = r.size(4)
	default:
		return 0, typeError("array", c)
	}
	if err == nil && n > r.left() {
		err = ErrTruncated
	}
	return n, err
}

// mapLen reads a map header; see arrayLen.
func (r *reader) mapLen() (int, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	var n int
	switch {
	case c&0xf0 == 0x80:
		r.pos++
		n = int(c & 0x0f)
	case c == 0xde:
		r.pos++
		n, err = r.size(2)
	case c == 0xdf:
		r.pos++
		n, err = r.size(4)
	default:
		return 0, typeError("map", c)
	}
	if err == nil && n > r.left()/2 {
		err = ErrTruncated
	}
	return n, err
}

// str reads a string as a view into the payload.
func (r *reader) str() ([]byte, error) {
	c, err := r.peek()
	if err != nil {
		return nil, err
	}
	var n int
	switch {
	case c&0xe0 == 0xa0:
		r.pos++
		n = int(c & 0x1f)
	case c == 0xd9:
		r.pos++
		n, err = r.size(1)
	case c == 0xda:
		r.pos++
		n, err = r.size(2)
	case c == 0xdb:
		r.pos++
		n, err = r.size(4)
	default:
		return nil, typeError("str", c)
	}
	if err != nil {
		return nil, err
	}
	return r.next(n)
}

// bits reads any msgpack integer as its 64-bit two's-complement pattern;
// neg reports a negative signed encoding.
func (r *reader) bits() (v uint64, neg bool, err error) {
	c, err := r.peek()
	if err != nil {
		return 0, false, err
	}
	switch {
	case c <= 0x7f:
		r.pos++
		return uint64(c), false, nil
	case c >= 0xe0:
		r.pos++
		return uint64(int64(int8(c))), true, nil
	}
	var w int
	switch c {
	case 0xcc, 0xd0:
		w = 1
	case 0xcd, 0xd1:
		w = 2
	case 0xce, 0xd2:
		w = 4
	case 0xcf, 0xd3:
		w = 8
	default:
		return 0, false, typeError("int", c)
	}
	r.pos++
	p, err := r.next(w)
	if err != nil {
		return 0, false, err
	}
	signed := c >= 0xd0
	switch w {
	case 1:
		if signed {
			return uint64(int64(int8(p[0]))), int8(p[0]) < 0, nil
		}
		return uint64(p[0]), false, nil
	case 2:
		u := binary.BigEndian.Uint16(p)
		if signed {
			return uint64(int64(int16(u))), int16(u) < 0, nil
		}
		return uint64(u), false, nil
	case 4:
		u := binary.BigEndian.Uint32(p)
		if signed {
			return uint64(int64(int32(u))), int32(u) < 0, nil
		}
		return uint64(u), false, nil
	}
	u := binary.BigEndian.Uint64(p)
	return u, signed && int64(u) < 0, nil
}

// int reads an integer that must fit an int64.
func (r *reader) int() (int64, error) {
	v, neg, err := r.bits()
	if err != nil {
		return 0, err
	}
	if !neg && v > math.MaxInt64 {
		return 0, fmt.Errorf("%w: %d overflows int64", ErrMalformed, v)
	}
	return int64(v), nil
}

// hash reads a block hash: an integer of either sign, reinterpreted bit for
// bit, or a binary digest of which the last 8 bytes big-endian are the hash
// (vLLM's VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0 sends the 32-byte digest,
// and its int form is exactly those bytes).
func (r *reader) hash() (uint64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	if c < 0xc4 || c > 0xc6 {
		v, _, err := r.bits()
		return v, err
	}
	r.pos++
	n, err := r.size(1 << (c - 0xc4))
	if err != nil {
		return 0, err
	}
	p, err := r.next(n)
	if err != nil {
		return 0, err
	}
	if n < 8 {
		return 0, fmt.Errorf("%w: %d-byte digest, want at least 8", ErrMalformed, n)
	}
	return binary.BigEndian.Uint64(p[n-8:]), nil
}

// token reads a token id, which must fit a u32.
func (r *reader) token() (uint32, error) {
	// Fast paths for the two encodings tokens arrive in: small ids as
	// fixints, the rest of the u32 range mostly as `ce`.
	if r.pos+5 <= len(r.b) {
		switch c := r.b[r.pos]; {
		case c <= 0x7f:
			r.pos++
			return uint32(c), nil
		case c == 0xce:
			t := binary.BigEndian.Uint32(r.b[r.pos+1 : r.pos+5])
			r.pos += 5
			return t, nil
		}
	}
	v, neg, err := r.bits()
	if err != nil {
		return 0, err
	}
	if neg || v > math.MaxUint32 {
		return 0, fmt.Errorf("%w: token %d outside u32", ErrMalformed, int64(v))
	}
	return uint32(v), nil
}

// float reads a float of either width, or an integer (some publishers
// write whole-second timestamps as ints).
func (r *reader) float() (float64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	switch c {
	case 0xca:
		r.pos++
		p, err := r.next(4)
		if err != nil {
			return 0, err
		}
		return float64(math.Float32frombits(binary.BigEndian.Uint32(p))), nil
	case 0xcb:
		r.pos++
		p, err := r.next(8)
		if err != nil {
			return 0, err
		}
		return math.Float64frombits(binary.BigEndian.Uint64(p)), nil
	}
	if !isInt(c) {
		return 0, typeError("float", c)
	}
	v, neg, err := r.bits()
	if err != nil {
		return 0, err
	}
	if neg {
		return float64(int64(v)), nil
	}
	return float64(v), nil
}

// skip consumes one value of any type. It counts pending values instead of
// recursing, so deep nesting cannot exhaust the stack.
func (r *reader) skip() error {
	for pending := 1; pending > 0; pending-- {
		c, err := r.peek()
		if err != nil {
			return err
		}
		r.pos++
		var n int // bytes of payload to jump over
		switch {
		case c <= 0x7f, c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3:
		case c&0xf0 == 0x80:
			pending += 2 * int(c&0x0f)
		case c&0xf0 == 0x90:
			pending += int(c & 0x0f)
		case c&0xe0 == 0xa0:
			n = int(c & 0x1f)
		case c == 0xc4, c == 0xd9:
			n, err = r.size(1)
		case c == 0xc5, c == 0xda:
			n, err = r.size(2)
		case c == 0xc6, c == 0xdb:
			n, err = r.size(4)
		case c == 0xc7:
			n, err = r.size(1)
			n++ // ext type byte
		case c == 0xc8:
			n, err = r.size(2)
			n++
		case c == 0xc9:
			n, err = r.size(4)
			n++
		case c == 0xcc, c == 0xd0:
			n = 1
		case c == 0xcd, c == 0xd1:
			n = 2
		case c == 0xca, c == 0xce, c == 0xd2:
			n = 4
		case c == 0xcb, c == 0xcf, c == 0xd3:
			n = 8
		case c >= 0xd4 && c <= 0xd8: // fixext 1..16, plus the type byte
			n = 1<<(c-0xd4) + 1
		case c == 0xdc, c == 0xdd:
			r.pos--
			m, err := r.arrayLen()
			if err != nil {
				return err
			}
			pending += m
		case c == 0xde, c == 0xdf:
			r.pos--
			m, err := r.mapLen()
			if err != nil {
				return err
			}
			pending += 2 * m
		default: // 0xc1 is never used
			return fmt.Errorf("%w: reserved type byte 0xc1", ErrMalformed)
		}
		if err != nil {
			return err
		}
		if _, err := r.next(n); err != nil {
			return err
		}
		// Every pending value needs a byte; fail early on absurd counts.
		if pending-1 > r.left() {
			return ErrTruncated
		}
	}
	return nil
}

// Type tests on a type byte, cheap enough for per-value use.
func isMap(c byte) bool   { return c&0xf0 == 0x80 || c == 0xde || c == 0xdf }
func isArray(c byte) bool { return c&0xf0 == 0x90 || c == 0xdc || c == 0xdd }
func isStr(c byte) bool   { return c&0xe0 == 0xa0 || (c >= 0xd9 && c <= 0xdb) }
func isInt(c byte) bool   { return c <= 0x7f || c >= 0xe0 || (c >= 0xcc && c <= 0xd3) }

// typeError names the wanted and the found msgpack type.
func typeError(want string, c byte) error {
	return fmt.Errorf("%w: want %s, got %s", ErrMalformed, want, typeName(c))
}

func typeName(c byte) string {
	switch {
	case c <= 0x7f, c >= 0xe0, c >= 0xcc && c <= 0xd3:
		return "int"
	case c&0xf0 == 0x80, c == 0xde, c == 0xdf:
		return "map"
	case c&0xf0 == 0x90, c == 0xdc, c == 0xdd:
		return "array"
	case c&0xe0 == 0xa0, c >= 0xd9 && c <= 0xdb:
		return "str"
	case c == 0xc0:
		return "nil"
	case c == 0xc2, c == 0xc3:
		return "bool"
	case c >= 0xc4 && c <= 0xc6:
		return "bin"
	case c == 0xca, c == 0xcb:
		return "float"
	}
	return fmt.Sprintf("type byte 0x%02x", c)
}
