// This file holds the Decoder: a batch's envelope and event list, its counters and errors.

package kvevents

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
)

// DefaultMaxPayload is the largest payload a Decoder accepts unless told
// otherwise: far above any real batch, low enough that one hostile message
// cannot make the decoder allocate without bound.
const DefaultMaxPayload = 8 << 20

var (
	// ErrMalformed: the payload is not a batch in any known shape.
	ErrMalformed = errors.New("malformed payload")
	// ErrTruncated: the payload ends inside a value. It is an ErrMalformed.
	ErrTruncated = fmt.Errorf("%w: truncated", ErrMalformed)
	// ErrTooLarge: the payload exceeds the decoder's MaxPayload.
	ErrTooLarge = errors.New("payload too large")
)

// DecodeError rejects a whole batch: it says where the first structural
// problem is. Err wraps ErrMalformed or ErrTooLarge.
type DecodeError struct {
	Event int    // index in the batch's events; -1 for the envelope
	Field string // wire name, with [i] for an element; "" for the value itself
	Err   error
}

func (e *DecodeError) Error() string {
	where := "envelope"
	if e.Event >= 0 {
		where = "event " + strconv.Itoa(e.Event)
	}
	if e.Field != "" {
		where += " field " + e.Field
	}
	return "kvevents: decode " + where + ": " + e.Err.Error()
}

func (e *DecodeError) Unwrap() error { return e.Err }

// Stats are a Decoder's counters since it was made. Counts from a rejected
// batch are not included: a batch counts whole or not at all.
type Stats struct {
	Batches      uint64 // batches decoded
	Rejected     uint64 // batches refused with an error
	Events       uint64 // events returned
	UnknownTags  uint64 // events skipped for an unknown "type"
	UnknownKeys  uint64 // map keys and array positions skipped
	Placeholders uint64 // stored events without tokens (CPU offload)
	// Events dropped at the boundary, by reason.
	DroppedMedium    uint64 // medium not in the known table
	DroppedOwnership uint64 // ownership other than absent or "kvcr"
}

// tally is one batch's share of the counters, applied only if the batch
// decodes.
type tally struct {
	unknownTags, unknownKeys, placeholders uint64
	droppedMedium, droppedOwnership        uint64
}

// Decoder turns engine payloads into Batches. Its zero value is ready to
// use with DefaultMaxPayload; it is safe for concurrent use, and Stats may be
// read while it decodes.
//
// It accepts every shape of docs/wire.md §3.1–3.9 without being told which engine
// or build sent it, and applies these rules:
//   - Map fields are selected by name in any order; array fields by vLLM's
//     declaration order. In a BlockStored array, a map at position 7 is
//     SGLang's {"cache_salt": ...} element, anything else vLLM's lora_name.
//   - Unknown event types and unknown keys or positions are skipped and
//     counted; kv_cache_spec_sliding_window is not kept.
//   - vLLM's extra_keys: a root block's lone key besides the LoRA name is
//     the cache salt; other keys make the block's identity one no request
//     reproduces (Event.BlockExtra).
//   - Medium nil means device. An unknown medium drops its event (counted):
//     guessing a tier would put blocks where they are not.
//   - Ownership absent or nil means worker-owned, "kvcr" runner-owned; any
//     other value drops its event (counted).
//   - Medium "EXTERNAL" is runner-owned (Tier external, OwnedByRunner)
//     whatever the ownership field says: SGLang's KVCR linker has no
//     ownership field and reports the runner's inventory this way.
//   - A stored event with token_ids=[] or block_size=0 is a Placeholder
//     (counted); any other must have len(token_ids) ==
//     len(block_hashes)*block_size, or the batch is rejected.
//   - A structural error anywhere rejects the whole batch with a
//     *DecodeError; nothing of it is returned or counted but Rejected.
type Decoder struct {
	// MaxPayload caps a payload's size in bytes; 0 means DefaultMaxPayload.
	MaxPayload int
	// Logger, if set, gets a debug record for each dropped event.
	Logger *slog.Logger

	batches, rejected, events              atomic.Uint64
	unknownTags, unknownKeys, placeholders atomic.Uint64
	droppedMedium, droppedOwnership        atomic.Uint64
	pool                                   sync.Pool // of *scratch
}

// Stats returns a snapshot of the counters.
func (d *Decoder) Stats() Stats {
	return Stats{
		Batches:          d.batches.Load(),
		Rejected:         d.rejected.Load(),
		Events:           d.events.Load(),
		UnknownTags:      d.unknownTags.Load(),
		UnknownKeys:      d.unknownKeys.Load(),
		Placeholders:     d.placeholders.Load(),
		DroppedMedium:    d.droppedMedium.Load(),
		DroppedOwnership: d.droppedOwnership.Load(),
	}
}

// Decode decodes one message payload. On error nothing of the batch is
// returned and only Stats.Rejected moves. The Batch does not alias payload.
func (d *Decoder) Decode(payload []byte) (Batch, error) {
	limit := d.MaxPayload
	if limit <= 0 {
		limit = DefaultMaxPayload
	}
	if len(payload) > limit {
		d.rejected.Add(1)
		return Batch{}, &DecodeError{Event: -1, Field: "payload",
			Err: fmt.Errorf("%w: %d bytes, limit %d (MaxPayload)", ErrTooLarge, len(payload), limit)}
	}
	s, _ := d.pool.Get().(*scratch)
	if s == nil {
		s = new(scratch)
	}
	s.logger = d.Logger
	b, err := s.decode(payload)
	t := s.tally
	s.reset()
	if s.small() {
		d.pool.Put(s)
	}
	if err != nil {
		d.rejected.Add(1)
		return Batch{}, err
	}
	d.batches.Add(1)
	d.events.Add(uint64(len(b.Events)))
	addNonZero(&d.unknownTags, t.unknownTags)
	addNonZero(&d.unknownKeys, t.unknownKeys)
	addNonZero(&d.placeholders, t.placeholders)
	addNonZero(&d.droppedMedium, t.droppedMedium)
	addNonZero(&d.droppedOwnership, t.droppedOwnership)
	return b, nil
}

// addNonZero skips the atomic add in the common all-zero case, so counters
// that never move cost nothing per batch.
func addNonZero(c *atomic.Uint64, n uint64) {
	if n != 0 {
		c.Add(n)
	}
}

// scratch is the reusable working memory of one Decode call. Hashes,
// tokens and strings are gathered here and each event's share recorded as a
// span; finish copies them into exactly sized per-batch arrays, so a batch
// costs a handful of allocations however many fields it has.
type scratch struct {
	r      reader
	hashes []uint64
	tokens []uint32
	extra  []uint64 // BlockExtra digests, by span
	strs   []byte
	events []Event // the batch's own; not reused
	spans  []span
	tally  tally
	logger *slog.Logger
}

// span locates an event's slices in the scratch arrays.
type span struct {
	hashes, tokens, extra [2]int
	strs                  [numStrSlots][2]int
}

// String fields copied through the arena, by slot.
const (
	slotLoRAName = iota
	slotCacheSalt
	slotSessionID
	slotSpecKind
	slotLocality
	numStrSlots
)

func (ev *Event) strSlot(slot int) *string {
	switch slot {
	case slotLoRAName:
		return &ev.LoRAName
	case slotCacheSalt:
		return &ev.CacheSalt
	case slotSessionID:
		return &ev.SessionID
	case slotSpecKind:
		return &ev.SpecKind
	}
	return &ev.Locality
}

func (s *scratch) reset() {
	s.r = reader{}
	s.hashes = s.hashes[:0]
	s.tokens = s.tokens[:0]
	s.extra = s.extra[:0]
	s.strs = s.strs[:0]
	s.events = nil
	s.spans = s.spans[:0]
	s.tally = tally{}
	s.logger = nil
}

// small reports whether the scratch is worth pooling: one huge batch must
// not pin its memory for the life of the process.
func (s *scratch) small() bool {
	const limit = 1 << 20
	return cap(s.hashes) <= limit && cap(s.tokens) <= limit && cap(s.strs) <= limit && cap(s.spans) <= limit/16
}

func envelopeError(field string, err error) error {
	return &DecodeError{Event: -1, Field: field, Err: err}
}

func (s *scratch) decode(p []byte) (Batch, error) {
	s.r = reader{b: p}
	var b Batch
	c, err := s.r.peek()
	if err != nil {
		return b, envelopeError("", err)
	}
	if isMap(c) {
		err = s.mapEnvelope(&b)
	} else {
		err = s.arrayEnvelope(&b)
	}
	if err != nil {
		return b, err
	}
	if n := s.r.left(); n != 0 {
		return b, envelopeError("", fmt.Errorf("%w: %d trailing bytes after the batch", ErrMalformed, n))
	}
	s.finish(&b)
	return b, nil
}

// arrayEnvelope reads [ts, events] or [ts, events, dp_rank]; positions
// beyond those are skipped and counted, as later builds may append fields.
func (s *scratch) arrayEnvelope(b *Batch) error {
	n, err := s.r.arrayLen()
	if err != nil {
		return envelopeError("", err)
	}
	if n < 2 {
		return envelopeError("", fmt.Errorf("%w: %d-element envelope, want [ts, events] or [ts, events, %s]", ErrMalformed, n, KeyDPRank))
	}
	if b.TS, err = s.r.float(); err != nil {
		return envelopeError(KeyTS, err)
	}
	if err := s.eventList(); err != nil {
		return err
	}
	if n >= 3 {
		if err := s.dpRank(b); err != nil {
			return err
		}
	}
	for i := 3; i < n; i++ {
		s.tally.unknownKeys++
		if err := s.r.skip(); err != nil {
			return envelopeError("["+strconv.Itoa(i)+"]", err)
		}
	}
	return nil
}

// mapEnvelope reads {ts, events, data_parallel_rank} in any order.
func (s *scratch) mapEnvelope(b *Batch) error {
	n, err := s.r.mapLen()
	if err != nil {
		return envelopeError("", err)
	}
	sawEvents := false
	for range n {
		key, err := s.r.str()
		if err != nil {
			return envelopeError("key", err)
		}
		switch string(key) {
		case KeyTS:
			if b.TS, err = s.r.float(); err != nil {
				return envelopeError(KeyTS, err)
			}
		case KeyEvents:
			if sawEvents {
				return envelopeError(KeyEvents, fmt.Errorf("%w: duplicate key", ErrMalformed))
			}
			sawEvents = true
			if err := s.eventList(); err != nil {
				return err
			}
		case KeyDPRank:
			if err := s.dpRank(b); err != nil {
				return err
			}
		default:
			s.tally.unknownKeys++
			if err := s.r.skip(); err != nil {
				return envelopeError(string(key), err)
			}
		}
	}
	if !sawEvents {
		return envelopeError(KeyEvents, fmt.Errorf("%w: missing", ErrMalformed))
	}
	return nil
}

func (s *scratch) dpRank(b *Batch) error {
	if s.r.nil() {
		b.DPRank, b.HasDPRank = 0, false
		return nil
	}
	v, err := s.r.int()
	if err != nil {
		return envelopeError(KeyDPRank, err)
	}
	b.DPRank, b.HasDPRank = int(v), true
	return nil
}

func (s *scratch) eventList() error {
	n, err := s.r.arrayLen()
	if err != nil {
		return envelopeError(KeyEvents, err)
	}
	// Sized by the header for typical batches; a hostile count only
	// reserves a bounded amount, and append grows past it when real.
	s.events = make([]Event, 0, min(n, 256))
	for i := range n {
		if err := s.event(i); err != nil {
			return err
		}
	}
	return nil
}

// finish copies the scratch into exactly sized arrays owned by the batch.
// Slices get full slice expressions so that appending to one event's slice
// cannot write into its neighbour's.
func (s *scratch) finish(b *Batch) {
	if len(s.events) == 0 {
		return
	}
	events := s.events[:len(s.events):len(s.events)]
	var hashes []uint64
	if len(s.hashes) > 0 {
		hashes = make([]uint64, len(s.hashes))
		copy(hashes, s.hashes)
	}
	var tokens []uint32
	if len(s.tokens) > 0 {
		tokens = make([]uint32, len(s.tokens))
		copy(tokens, s.tokens)
	}
	var extra []uint64
	if len(s.extra) > 0 {
		extra = make([]uint64, len(s.extra))
		copy(extra, s.extra)
	}
	arena := string(s.strs)
	for i := range events {
		ev, sp := &events[i], &s.spans[i]
		if h := sp.hashes; h[1] > h[0] {
			ev.BlockHashes = hashes[h[0]:h[1]:h[1]]
		}
		if t := sp.tokens; t[1] > t[0] {
			ev.TokenIDs = tokens[t[0]:t[1]:t[1]]
		}
		if x := sp.extra; x[1] > x[0] {
			ev.BlockExtra = extra[x[0]:x[1]:x[1]]
		}
		for slot, r := range sp.strs {
			if r[1] > r[0] {
				*ev.strSlot(slot) = arena[r[0]:r[1]]
			}
		}
	}
	b.Events = events
}
