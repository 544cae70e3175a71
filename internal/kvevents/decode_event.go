// This file holds the decoding of one event: its tag, its fields by name or position, its checks.

package kvevents

import (
	"fmt"
	"strconv"

	"github.com/zeebo/xxh3"
)

// eventState is what an event's fields leave behind for finishEvent.
type eventState struct {
	idx        int
	seen       fieldSet
	medium     []byte // view into the payload; nil when absent or nil
	badOwner   bool
	hashStart  int // scratch lengths at the start, to roll back a dropped event
	tokStart   int
	strStart   int
	extra      [2]int // extra_keys' bytes in the payload, read once the event is whole
	extraStart int
}

// fieldError locates a failure inside an event. It is made only on
// failure: the success path returns a nil error, cheap to pass up.
type fieldError struct {
	f    field
	elem int // element index, -1 for the field as a whole
	err  error
	key  string // the key, for a field we do not know
}

func (e *fieldError) Error() string { return e.err.Error() }

// fail wraps err, if any, with where it happened.
func fail(f field, elem int, err error) error {
	if err == nil {
		return nil
	}
	return &fieldError{f: f, elem: elem, err: err}
}

func missing(f field) error {
	return &fieldError{f: f, elem: -1, err: fmt.Errorf("%w: missing", ErrMalformed)}
}

// eventError turns a failure inside event idx into the batch's error.
func (s *scratch) eventError(idx int, err error) error {
	fe, ok := err.(*fieldError)
	if !ok {
		return &DecodeError{Event: idx, Err: err}
	}
	name := fieldNames[fe.f]
	if fe.f == fUnknown {
		name = fe.key
	}
	if fe.elem >= 0 {
		name += "[" + strconv.Itoa(fe.elem) + "]"
	}
	return &DecodeError{Event: idx, Field: name, Err: fe.err}
}

// event decodes event idx of the batch, appending it to s.events unless it
// is skipped (unknown tag) or dropped (unknown medium, foreign ownership).
func (s *scratch) event(idx int) error {
	start := s.r.pos
	c, err := s.r.peek()
	if err != nil {
		return &DecodeError{Event: idx, Err: err}
	}
	isMap := isMap(c)
	var n int
	if isMap {
		n, err = s.r.mapLen()
	} else {
		n, err = s.r.arrayLen()
	}
	if err != nil {
		return &DecodeError{Event: idx, Err: err}
	}
	kind, err := s.tag(isMap, n)
	if err != nil {
		return &DecodeError{Event: idx, Field: KeyType, Err: err}
	}
	if kind == 0 {
		s.tally.unknownTags++
		s.r.pos = start
		if err := s.r.skip(); err != nil {
			return &DecodeError{Event: idx, Err: err}
		}
		return nil
	}
	s.events = append(s.events, Event{Kind: kind})
	s.spans = append(s.spans, span{})
	ev, sp := &s.events[len(s.events)-1], &s.spans[len(s.spans)-1]
	st := eventState{idx: idx, hashStart: len(s.hashes), tokStart: len(s.tokens), strStart: len(s.strs), extraStart: len(s.extra)}
	if isMap {
		err = s.mapFields(n, kindFields(kind), ev, sp, &st)
	} else {
		err = s.arrayFields(n, kind, ev, sp, &st)
	}
	if err == nil {
		err = s.finishEvent(ev, sp, &st)
	}
	if err != nil {
		return s.eventError(idx, err)
	}
	return nil
}

// tag reads the event type. An array's tag is its first element; a map's
// "type" key may sit anywhere, so the map is scanned for it and the reader
// rewound to the first key.
func (s *scratch) tag(isMap bool, n int) (Kind, error) {
	if !isMap {
		if n == 0 {
			return 0, fmt.Errorf("%w: empty event array", ErrMalformed)
		}
		tag, err := s.r.str()
		return kindOf(tag), err
	}
	first := s.r.pos
	for range n {
		key, err := s.r.str()
		if err != nil {
			return 0, err
		}
		if string(key) == KeyType {
			tag, err := s.r.str()
			s.r.pos = first
			return kindOf(tag), err
		}
		if err := s.r.skip(); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("%w: missing", ErrMalformed)
}

func kindFields(k Kind) fieldSet {
	switch k {
	case KindStored:
		return storedFields
	case KindRemoved:
		return removedFields
	}
	return clearedFields
}

func (s *scratch) mapFields(n int, allowed fieldSet, ev *Event, sp *span, st *eventState) error {
	for range n {
		key, err := s.r.str()
		if err != nil {
			return fail(fUnknown, -1, err)
		}
		f := fieldOf(key)
		if !allowed.has(f) {
			if f != fType {
				s.tally.unknownKeys++
			}
			if err := s.r.skip(); err != nil {
				return &fieldError{f: f, elem: -1, err: err, key: string(key)}
			}
			continue
		}
		if err := s.field(f, ev, sp, st); err != nil {
			return err
		}
	}
	return nil
}

// arrayFields reads positions 1..n-1 of an array event (the tag is read).
func (s *scratch) arrayFields(n int, kind Kind, ev *Event, sp *span, st *eventState) error {
	var positions []field
	switch kind {
	case KindStored:
		positions = storedPositions
	case KindRemoved:
		positions = removedPositions
	}
	for pos := 1; pos < n; pos++ {
		if pos > len(positions) {
			s.tally.unknownKeys++
			if err := s.r.skip(); err != nil {
				return &fieldError{f: fUnknown, elem: -1, err: err, key: "[" + strconv.Itoa(pos) + "]"}
			}
			continue
		}
		f := positions[pos-1]
		if f == fLoRAName {
			if c, _ := s.r.peek(); isMap(c) {
				f = fSGLangExtra
			}
		}
		if err := s.field(f, ev, sp, st); err != nil {
			return err
		}
	}
	return nil
}

// field decodes one field's value into ev.
func (s *scratch) field(f field, ev *Event, sp *span, st *eventState) error {
	st.seen |= 1 << f
	var err error
	switch f {
	case fBlockHashes:
		return s.hashList(sp)
	case fParent:
		if ev.HasParent = !s.r.nil(); ev.HasParent {
			ev.ParentHash, err = s.r.hash()
			// llm-d's simulator writes 0, not nil, for a root block in
			// array form; a real engine hash of 0 has odds of 2^-64.
			ev.HasParent = ev.ParentHash != 0
		}
	case fTokenIDs:
		return s.tokenList(sp)
	case fBlockSize:
		var v int64
		if v, err = s.r.int(); err == nil && (v < 0 || v > 1<<31) {
			err = fmt.Errorf("%w: %d out of range", ErrMalformed, v)
		}
		ev.BlockSize = int(v)
	case fLoRAID:
		if ev.HasLoRAID = !s.r.nil(); ev.HasLoRAID {
			ev.LoRAID, err = s.r.int()
		}
	case fMedium:
		st.medium = nil
		if !s.r.nil() {
			st.medium, err = s.r.str()
		}
	case fGroupIdx:
		var v int64
		if !s.r.nil() {
			v, err = s.r.int()
		}
		ev.GroupIdx = int(v)
	case fLoRAName:
		err = s.text(slotLoRAName, ev, sp)
	case fCacheSalt:
		err = s.text(slotCacheSalt, ev, sp)
	case fSessionID:
		err = s.text(slotSessionID, ev, sp)
	case fSpecKind:
		err = s.text(slotSpecKind, ev, sp)
	case fLocality:
		err = s.text(slotLocality, ev, sp)
	case fOwnership:
		// Any value but nil or "kvcr" drops the event; not a structural error.
		st.badOwner, ev.Ownership = false, OwnedByWorker
		if c, _ := s.r.peek(); isStr(c) {
			var v []byte
			v, err = s.r.str()
			st.badOwner = string(v) != OwnerKVCR
			ev.Ownership = OwnedByRunner
		} else if !s.r.nil() {
			st.badOwner = true
			err = s.r.skip()
		}
	case fSGLangExtra:
		var n int
		if n, err = s.r.mapLen(); err == nil {
			return s.mapFields(n, sglangExtra, ev, sp, st)
		}
	case fExtraKeys:
		// Read in finishEvent: what they mean depends on lora_name and
		// parent_block_hash, which may come later.
		start := s.r.pos
		err = s.r.skip()
		st.extra = [2]int{start, s.r.pos}
	default: // sliding window: accepted, not kept
		err = s.r.skip()
	}
	return fail(f, -1, err)
}

// extraKeys reads a vLLM store's extra_keys: per block nil or the keys
// vLLM hashed with the block's tokens, the LoRA name first when there is
// one. A root block's lone other key is the request's cache salt (vLLM adds
// it to the first block only); any other key (a multimodal input's hash,
// prompt embeddings) is digested into BlockExtra, so that no request the
// router hashes from tokens matches the block.
func (s *scratch) extraKeys(ev *Event, sp *span, st *eventState) error {
	r := reader{b: s.r.b[:st.extra[1]], pos: st.extra[0]}
	if r.nil() {
		return nil
	}
	ev.ExtraKeys = true
	n, err := r.arrayLen()
	if err != nil {
		return fail(fExtraKeys, -1, err)
	}
	lora := s.textOf(slotLoRAName, ev, sp)
	blocks := sp.hashes[1] - sp.hashes[0]
	start, any := len(s.extra), false
	for i := range n {
		salt, digest, err := s.blockExtra(&r, lora, i == 0 && !ev.HasParent)
		if err != nil {
			return fail(fExtraKeys, i, err)
		}
		if salt != nil && ev.CacheSalt == "" && sp.strs[slotCacheSalt] == [2]int{} {
			at := len(s.strs)
			s.strs = append(s.strs, salt...)
			sp.strs[slotCacheSalt] = [2]int{at, len(s.strs)}
		}
		if i < blocks {
			s.extra = append(s.extra, digest)
			any = any || digest != 0
		}
	}
	if !any { // the usual case: tokens (and LoRA, salt) say it all
		s.extra = s.extra[:start]
		return nil
	}
	for len(s.extra)-start < blocks {
		s.extra = append(s.extra, 0)
	}
	sp.extra = [2]int{start, len(s.extra)}
	return nil
}

// blockExtra reads one block's extra keys: with saltOK, a lone string key
// other than the LoRA name is returned as the salt; otherwise the keys
// other than the LoRA name are digested (0 when there are none).
func (s *scratch) blockExtra(r *reader, lora []byte, saltOK bool) (salt []byte, digest uint64, err error) {
	if r.nil() {
		return nil, 0, nil
	}
	c, err := r.peek()
	if err != nil {
		return nil, 0, err
	}
	if !isArray(c) { // not vLLM's tuple: the whole value is one key
		start := r.pos
		if err := r.skip(); err != nil {
			return nil, 0, err
		}
		return nil, xxh3.Hash(r.b[start:r.pos]) | 1, nil
	}
	m, err := r.arrayLen()
	if err != nil {
		return nil, 0, err
	}
	h := xxh3.New()
	keys := 0
	for range m {
		start := r.pos
		if c, _ := r.peek(); isStr(c) {
			v, err := r.str()
			if err != nil {
				return nil, 0, err
			}
			if lora != nil && string(v) == string(lora) {
				continue
			}
			salt = v
		} else {
			salt = nil // a salt is a string, and alone
			if err := r.skip(); err != nil {
				return nil, 0, err
			}
		}
		keys++
		h.Write(r.b[start:r.pos])
	}
	switch {
	case keys == 0:
		return nil, 0, nil
	case keys == 1 && saltOK && len(salt) > 0:
		return salt, 0, nil
	}
	return nil, h.Sum64() | 1, nil
}

// textOf is a string field's bytes as decoded so far, nil when unset.
func (s *scratch) textOf(slot int, ev *Event, sp *span) []byte {
	if r := sp.strs[slot]; r[1] > r[0] {
		return s.strs[r[0]:r[1]]
	}
	if v := *ev.strSlot(slot); v != "" {
		return []byte(v)
	}
	return nil
}

func (s *scratch) hashList(sp *span) error {
	n, err := s.r.arrayLen()
	if err != nil {
		return fail(fBlockHashes, -1, err)
	}
	start := len(s.hashes)
	for i := range n {
		h, err := s.r.hash()
		if err != nil {
			return fail(fBlockHashes, i, err)
		}
		s.hashes = append(s.hashes, h)
	}
	sp.hashes = [2]int{start, len(s.hashes)}
	return nil
}

// tokenList reads token ids. EAGLE speculative decoding makes SGLang key
// pages by bigrams, so each position arrives as the pair [t_i, t_i+1]; the
// pair's first element is position i's own token, and taking it restores
// the plain sequence the router hashes (the second is the next position's).
func (s *scratch) tokenList(sp *span) error {
	n, err := s.r.arrayLen()
	if err != nil {
		return fail(fTokenIDs, -1, err)
	}
	start := len(s.tokens)
	for i := range n {
		var t uint32
		if c, _ := s.r.peek(); isArray(c) {
			t, err = s.pairToken()
		} else {
			t, err = s.r.token()
		}
		if err != nil {
			return fail(fTokenIDs, i, err)
		}
		s.tokens = append(s.tokens, t)
	}
	sp.tokens = [2]int{start, len(s.tokens)}
	return nil
}

func (s *scratch) pairToken() (uint32, error) {
	m, err := s.r.arrayLen()
	if err != nil {
		return 0, err
	}
	if m == 0 {
		return 0, fmt.Errorf("%w: empty token pair", ErrMalformed)
	}
	t, err := s.r.token()
	for ; m > 1 && err == nil; m-- {
		_, err = s.r.token()
	}
	return t, err
}

// text reads a nil-or-string field: common values are interned, the rest
// copied into the batch's string arena.
func (s *scratch) text(slot int, ev *Event, sp *span) error {
	sp.strs[slot] = [2]int{}
	*ev.strSlot(slot) = ""
	if s.r.nil() {
		return nil
	}
	v, err := s.r.str()
	if err != nil {
		return err
	}
	if in, ok := intern(v); ok {
		*ev.strSlot(slot) = in
		return nil
	}
	start := len(s.strs)
	s.strs = append(s.strs, v...)
	sp.strs[slot] = [2]int{start, len(s.strs)}
	return nil
}

// finishEvent checks what needs the whole event, then maps medium and
// ownership, dropping the event when either is not one we know.
func (s *scratch) finishEvent(ev *Event, sp *span, st *eventState) error {
	if ev.Kind == KindStored || ev.Kind == KindRemoved {
		if !st.seen.has(fBlockHashes) {
			return missing(fBlockHashes)
		}
	}
	if ev.Kind == KindStored {
		for _, f := range []field{fTokenIDs, fBlockSize} {
			if !st.seen.has(f) {
				return missing(f)
			}
		}
		tokens := sp.tokens[1] - sp.tokens[0]
		hashes := sp.hashes[1] - sp.hashes[0]
		ev.Placeholder = tokens == 0 || ev.BlockSize == 0
		if !ev.Placeholder && (tokens%ev.BlockSize != 0 || tokens/ev.BlockSize != hashes) {
			return fail(fTokenIDs, -1, fmt.Errorf("%w: %d token ids for %d %s of %s %d",
				ErrMalformed, tokens, hashes, KeyBlockHashes, KeyBlockSize, ev.BlockSize))
		}
		if st.extra[1] > st.extra[0] {
			if err := s.extraKeys(ev, sp, st); err != nil {
				return err
			}
		}
	}
	if st.medium != nil {
		name, tier, ok := MediumTier(st.medium)
		if !ok {
			s.tally.droppedMedium++
			s.drop(st, "unknown medium", string(st.medium))
			return nil
		}
		ev.Tier, ev.Medium = tier, name
		// SGLang's KVCR linker reports runner-owned inventory this way.
		if ev.Medium == MediumLinker {
			ev.Ownership = OwnedByRunner
		}
	}
	if st.badOwner {
		s.tally.droppedOwnership++
		s.drop(st, "ownership not "+strconv.Quote(OwnerKVCR), "")
		return nil
	}
	if ev.Placeholder {
		s.tally.placeholders++
	}
	return nil
}

// drop removes the event being decoded, and what it appended to scratch.
func (s *scratch) drop(st *eventState, reason, value string) {
	s.events = s.events[:len(s.events)-1]
	s.spans = s.spans[:len(s.spans)-1]
	s.hashes = s.hashes[:st.hashStart]
	s.tokens = s.tokens[:st.tokStart]
	s.strs = s.strs[:st.strStart]
	s.extra = s.extra[:st.extraStart]
	if s.logger != nil {
		s.logger.Debug("kv event dropped", "event", st.idx, "reason", reason, "value", value)
	}
}
