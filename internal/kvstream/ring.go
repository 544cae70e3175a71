// This file holds the ring of a publisher's last batches, kept for replay.

package kvstream

// ring keeps the last batches a publisher sent, for replay. Seqs in it are
// contiguous: every stamped seq is stored, whether or not it reached the wire.
type ring struct {
	buf   []ringEntry
	start int // index of the oldest entry
	n     int
}

type ringEntry struct {
	seq     uint64
	payload []byte
}

func newRing(size int) *ring {
	return &ring{buf: make([]ringEntry, size)}
}

func (r *ring) add(seq uint64, payload []byte) {
	if len(r.buf) == 0 {
		return
	}
	if r.n < len(r.buf) {
		r.buf[(r.start+r.n)%len(r.buf)] = ringEntry{seq, payload}
		r.n++
		return
	}
	r.buf[r.start] = ringEntry{seq, payload}
	r.start = (r.start + 1) % len(r.buf)
}

// from appends to dst the entries with seq >= start, oldest first.
func (r *ring) from(dst []ringEntry, start uint64) []ringEntry {
	if r.n == 0 {
		return dst
	}
	skip := 0
	if oldest := r.buf[r.start].seq; start > oldest {
		if start-oldest >= uint64(r.n) {
			return dst
		}
		skip = int(start - oldest)
	}
	for i := skip; i < r.n; i++ {
		dst = append(dst, r.buf[(r.start+i)%len(r.buf)])
	}
	return dst
}
