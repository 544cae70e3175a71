// This file holds the payloads of SGLang's snapshot-v1 answer: the header and the chunks of block records.

package kvevents

import (
	"fmt"
	"math"
)

// Wire facts of SGLang's snapshot-v1 payloads (docs/wire.md §2.5).
const (
	// SnapshotVersion is the header's version this decoder reads.
	SnapshotVersion = 1
	// snapshotHeaderFields is the header's field count: version, epoch,
	// replica_rank, resume_seq, barrier_seq, barrier_id, record_count.
	snapshotHeaderFields = 7
	// snapshotBlockFields is a record's: parent_block_hash, block_hashes.
	snapshotBlockFields = 2
	// maxSnapshotText bounds the header's strings (SGLang's epoch and
	// barrier id are 32 hex digits).
	maxSnapshotText = 256
)

// SnapshotHeader is the first payload of a snapshot-v1 answer: which
// publisher lifecycle (Epoch) and DP replica the cut is of, where the live
// stream resumes after it (ResumeSeq, the seq after the barrier batch the
// publisher stamped at the cut, BarrierSeq), and how many block records
// the chunks carry.
type SnapshotHeader struct {
	Version     int64
	Epoch       string
	ReplicaRank int64
	ResumeSeq   uint64
	BarrierSeq  uint64
	BarrierID   string
	RecordCount uint64
}

// SnapshotBlock is one record of a snapshot chunk: a run of blocks, the
// first under Parent (none when !HasParent), each under the one before.
// SGLang writes one hash per record; the shape leaves room for runs.
type SnapshotBlock struct {
	Parent    uint64
	HasParent bool
	Hashes    []uint64
}

// DecodeSnapshotHeader reads a header payload: a msgpack array of at least
// the seven fields in order (later fields are skipped). Its version must be
// SnapshotVersion and its resume seq follow its barrier seq.
func DecodeSnapshotHeader(p []byte) (SnapshotHeader, error) {
	var h SnapshotHeader
	if len(p) > DefaultMaxPayload {
		return h, fmt.Errorf("kvevents: snapshot header: %w: %d bytes", ErrTooLarge, len(p))
	}
	r := reader{b: p}
	n, err := r.arrayLen()
	if err != nil {
		return h, fmt.Errorf("kvevents: snapshot header: %w", err)
	}
	if n < snapshotHeaderFields {
		return h, fmt.Errorf("kvevents: snapshot header: %w: %d fields, want %d", ErrMalformed, n, snapshotHeaderFields)
	}
	var resume, barrier, count int64
	for i, f := range []struct {
		name string
		int  *int64
		str  *string
	}{
		{"version", &h.Version, nil}, {"epoch", nil, &h.Epoch}, {"replica_rank", &h.ReplicaRank, nil},
		{"resume_seq", &resume, nil}, {"barrier_seq", &barrier, nil}, {"barrier_id", nil, &h.BarrierID},
		{"record_count", &count, nil},
	} {
		if f.int != nil {
			if *f.int, err = r.int(); err == nil && *f.int < 0 {
				err = fmt.Errorf("%w: %d is negative", ErrMalformed, *f.int)
			}
		} else {
			var s []byte
			if s, err = r.str(); err == nil && len(s) > maxSnapshotText {
				err = fmt.Errorf("%w: %d bytes, at most %d", ErrMalformed, len(s), maxSnapshotText)
			}
			*f.str = string(s)
		}
		if err != nil {
			return h, fmt.Errorf("kvevents: snapshot header field %d (%s): %w", i, f.name, err)
		}
	}
	for range n - snapshotHeaderFields {
		if err := r.skip(); err != nil {
			return h, fmt.Errorf("kvevents: snapshot header: %w", err)
		}
	}
	if r.left() != 0 {
		return h, fmt.Errorf("kvevents: snapshot header: %w: %d trailing bytes", ErrMalformed, r.left())
	}
	h.ResumeSeq, h.BarrierSeq, h.RecordCount = uint64(resume), uint64(barrier), uint64(count)
	switch {
	case h.Version != SnapshotVersion:
		return h, fmt.Errorf("kvevents: snapshot header: %w: version %d, this reader knows %d", ErrMalformed, h.Version, SnapshotVersion)
	case h.ResumeSeq <= h.BarrierSeq || h.ResumeSeq == math.MaxUint64:
		return h, fmt.Errorf("kvevents: snapshot header: %w: resume_seq %d does not follow barrier_seq %d", ErrMalformed, h.ResumeSeq, h.BarrierSeq)
	}
	return h, nil
}

// DecodeSnapshotChunk reads a chunk payload, a msgpack array of
// [parent_block_hash or nil, [block_hash, ...]] records, and appends its
// records to dst. Hashes read as in events (§3.5): signed integers
// reinterpreted, a parent of 0 is none.
func DecodeSnapshotChunk(p []byte, dst []SnapshotBlock) ([]SnapshotBlock, error) {
	if len(p) > DefaultMaxPayload {
		return dst, fmt.Errorf("kvevents: snapshot chunk: %w: %d bytes", ErrTooLarge, len(p))
	}
	r := reader{b: p}
	n, err := r.arrayLen()
	if err != nil {
		return dst, fmt.Errorf("kvevents: snapshot chunk: %w", err)
	}
	for i := range n {
		b, err := snapshotBlock(&r)
		if err != nil {
			return dst, fmt.Errorf("kvevents: snapshot chunk record %d: %w", i, err)
		}
		dst = append(dst, b)
	}
	if r.left() != 0 {
		return dst, fmt.Errorf("kvevents: snapshot chunk: %w: %d trailing bytes", ErrMalformed, r.left())
	}
	return dst, nil
}

func snapshotBlock(r *reader) (SnapshotBlock, error) {
	var b SnapshotBlock
	n, err := r.arrayLen()
	if err != nil {
		return b, err
	}
	if n != snapshotBlockFields {
		return b, fmt.Errorf("%w: %d fields, want %d (parent_block_hash, block_hashes)", ErrMalformed, n, snapshotBlockFields)
	}
	if !r.nil() {
		if b.Parent, err = r.hash(); err != nil {
			return b, fmt.Errorf("parent_block_hash: %w", err)
		}
		b.HasParent = b.Parent != 0
	}
	k, err := r.arrayLen()
	if err != nil {
		return b, fmt.Errorf("block_hashes: %w", err)
	}
	if k == 0 {
		return b, fmt.Errorf("block_hashes: %w: empty", ErrMalformed)
	}
	b.Hashes = make([]uint64, k)
	for j := range b.Hashes {
		if b.Hashes[j], err = r.hash(); err != nil {
			return b, fmt.Errorf("block_hashes[%d]: %w", j, err)
		}
	}
	return b, nil
}
