// Package kvencode writes KV event batches the way vLLM and SGLang publish
// them, in each engine's wire forms: the simulated engine's side of the
// wire that kvevents decodes. Its tests check it against that decoder.
package kvencode

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"kvrouter/internal/kvevents"
)

// ErrUnencodable: the batch holds something the chosen wire form cannot
// carry, or something the decoder would read back differently.
var ErrUnencodable = errors.New("not encodable")

// Format is an engine wire form.
type Format uint8

const (
	// VLLMMap is vLLM's named-field form (vLLM ≥ v0.26); the only vLLM form
	// that carries locality, ownership and session_id.
	VLLMMap Format = iota
	// VLLMArray is vLLM's older positional form, trailing nils written.
	VLLMArray
	// SGLangMap is SGLang's named-field form; hashes are signed.
	SGLangMap
	// SGLangArray is SGLang's older positional form, with the cache salt in
	// an 8th-element map.
	SGLangArray
)

var formatNames = [...]string{"vllm-map", "vllm-array", "sglang-map", "sglang-array"}

func (f Format) String() string {
	if int(f) < len(formatNames) {
		return formatNames[f]
	}
	return "unknown"
}

// Envelope is the batch's outer shape.
type Envelope uint8

const (
	// EnvelopeArray is [ts, events, dp_rank|nil], what current engines send.
	EnvelopeArray Envelope = iota
	// EnvelopeLegacy is [ts, events], builds before mid-2025; the rank is lost.
	EnvelopeLegacy
	// EnvelopeMap is {ts, events, data_parallel_rank}.
	EnvelopeMap
)

// Encoder writes batches the way an engine does, so a simulated engine's
// stream is indistinguishable from a real one to any consumer: integers in
// msgpack-python's shortest form, fields in declaration order, defaults
// omitted exactly where the engine omits them.
type Encoder struct {
	Format   Format
	Envelope Envelope
	// Mediums overrides DefaultMedium per tier, for events whose Medium is "".
	Mediums map[kvevents.Tier]string
}

// Encode returns b's payload.
func (e *Encoder) Encode(b kvevents.Batch) ([]byte, error) {
	return e.Append(nil, b)
}

// Append appends b's payload to dst. On error dst is returned unchanged.
func (e *Encoder) Append(dst []byte, b kvevents.Batch) ([]byte, error) {
	if e.Format > SGLangArray {
		return dst, fmt.Errorf("kvencode: Format %d: %w", e.Format, ErrUnencodable)
	}
	out := dst
	switch e.Envelope {
	case EnvelopeLegacy:
		out = append(out, 0x92)
		out = appendFloat(out, b.TS)
	case EnvelopeMap:
		out = append(out, 0x83)
		out = appendStr(out, kvevents.KeyTS)
		out = appendFloat(out, b.TS)
		out = appendStr(out, kvevents.KeyEvents)
	default:
		out = append(out, 0x93)
		out = appendFloat(out, b.TS)
	}
	out = appendArrayLen(out, len(b.Events))
	for i := range b.Events {
		var err error
		if out, err = e.appendEvent(out, &b.Events[i]); err != nil {
			return dst, fmt.Errorf("kvencode: event %d: %w", i, err)
		}
	}
	switch e.Envelope {
	case EnvelopeLegacy:
		return out, nil
	case EnvelopeMap:
		out = appendStr(out, kvevents.KeyDPRank)
	}
	if !b.HasDPRank {
		return append(out, 0xc0), nil
	}
	return appendInt(out, int64(b.DPRank)), nil
}

func unencodable(field, why string) error {
	return fmt.Errorf("field %s: %s: %w", field, why, ErrUnencodable)
}

// DefaultMedium is the medium name the Encoder writes for a tier when an
// event does not carry its own.
func DefaultMedium(t kvevents.Tier) string {
	switch t {
	case kvevents.TierHost:
		return "CPU"
	case kvevents.TierDisk:
		return "DISK"
	case kvevents.TierExternal:
		return kvevents.MediumLinker
	}
	return "GPU"
}

// medium picks the name to write and checks the decoder will read the same
// tier and ownership back: "EXTERNAL" means runner-owned, and only vLLM's
// map form has another way to say runner-owned.
func (e *Encoder) medium(ev *kvevents.Event) (string, error) {
	m := ev.Medium
	if m == "" {
		m = e.Mediums[ev.Tier]
	}
	if m == "" {
		m = DefaultMedium(ev.Tier)
	}
	if _, tier, ok := kvevents.MediumTier([]byte(m)); !ok || tier != ev.Tier {
		return "", unencodable(kvevents.KeyMedium, fmt.Sprintf("%q is not a %s medium", m, ev.Tier))
	}
	if m == kvevents.MediumLinker && ev.Ownership != kvevents.OwnedByRunner {
		return "", unencodable(kvevents.KeyMedium, kvevents.MediumLinker+" marks runner-owned blocks; use another external medium")
	}
	if ev.Ownership == kvevents.OwnedByRunner && m != kvevents.MediumLinker && e.Format != VLLMMap {
		return "", unencodable(kvevents.KeyOwnership, fmt.Sprintf("%s carries runner ownership only as medium %s", e.Format, kvevents.MediumLinker))
	}
	return m, nil
}

func (e *Encoder) appendEvent(b []byte, ev *kvevents.Event) ([]byte, error) {
	sglang := e.Format == SGLangMap || e.Format == SGLangArray
	if e.Format != VLLMMap {
		switch {
		case ev.Locality != "":
			return b, unencodable(kvevents.KeyLocality, "only "+VLLMMap.String()+" carries it")
		case ev.SessionID != "" && e.Format != SGLangMap:
			return b, unencodable(kvevents.KeySessionID, "only map forms carry it")
		}
	}
	if sglang {
		switch {
		case ev.GroupIdx != 0:
			return b, unencodable(kvevents.KeyGroupIdx, "SGLang forms do not carry it")
		case ev.SpecKind != "":
			return b, unencodable(kvevents.KeySpecKind, "SGLang forms do not carry it")
		case ev.LoRAName != "" && e.Format == SGLangArray:
			return b, unencodable(kvevents.KeyLoRAName, "only "+SGLangMap.String()+" carries it")
		}
	} else if ev.Kind == kvevents.KindStored && ev.CacheSalt != "" && (ev.HasParent || len(ev.BlockHashes) == 0) {
		// vLLM puts the salt in a prefix's first block's extra keys only.
		return b, unencodable(kvevents.KeyCacheSalt, "vLLM forms carry it on a root store only")
	}
	if slices.ContainsFunc(ev.BlockExtra, func(x uint64) bool { return x != 0 }) {
		// SGLang has no extra keys, and vLLM's cannot be rebuilt from them.
		return b, unencodable(kvevents.KeyExtraKeys, "a digest does not say which keys it came from")
	}
	switch ev.Kind {
	case kvevents.KindStored:
		return e.appendStored(b, ev, sglang)
	case kvevents.KindRemoved:
		return e.appendRemoved(b, ev, sglang)
	case kvevents.KindCleared:
		if ev.Ownership == kvevents.OwnedByRunner {
			if e.Format != VLLMMap {
				return b, unencodable(kvevents.KeyOwnership, "only "+VLLMMap.String()+" carries it")
			}
			b = append(b, 0x82)
			b = appendStr(b, kvevents.KeyType)
			b = appendStr(b, kvevents.TagCleared)
			b = appendStr(b, kvevents.KeyOwnership)
			return appendStr(b, kvevents.OwnerKVCR), nil
		}
		if e.Format == VLLMArray || e.Format == SGLangArray {
			return appendStr(append(b, 0x91), kvevents.TagCleared), nil
		}
		b = append(b, 0x81)
		b = appendStr(b, kvevents.KeyType)
		return appendStr(b, kvevents.TagCleared), nil
	}
	return b, unencodable(kvevents.KeyType, fmt.Sprintf("kind %d", ev.Kind))
}

func (e *Encoder) appendStored(b []byte, ev *kvevents.Event, sglang bool) ([]byte, error) {
	if ev.BlockSize < 0 {
		return b, unencodable(kvevents.KeyBlockSize, "negative")
	}
	if placeholder := len(ev.TokenIDs) == 0 || ev.BlockSize == 0; placeholder != ev.Placeholder {
		return b, unencodable(kvevents.KeyTokenIDs, "Placeholder must be set exactly when token_ids is empty or block_size is 0")
	}
	if !ev.Placeholder && len(ev.TokenIDs) != len(ev.BlockHashes)*ev.BlockSize {
		return b, unencodable(kvevents.KeyTokenIDs, fmt.Sprintf("%d token ids for %d blocks of %d", len(ev.TokenIDs), len(ev.BlockHashes), ev.BlockSize))
	}
	medium, err := e.medium(ev)
	if err != nil {
		return b, err
	}
	isMap := e.Format == VLLMMap || e.Format == SGLangMap
	// Header: count the fields this form writes.
	switch {
	case e.Format == VLLMArray:
		b = appendStr(append(b, 0x9c), kvevents.TagStored) // tag + 11 positions
	case e.Format == SGLangArray:
		if ev.CacheSalt != "" {
			b = appendStr(append(b, 0x98), kvevents.TagStored)
		} else {
			b = appendStr(append(b, 0x97), kvevents.TagStored)
		}
	default:
		n := 7 // type … medium
		if sglang {
			n += count(ev.CacheSalt != "", ev.SessionID != "", ev.LoRAName != "")
		} else {
			n += 3 + count(ev.SpecKind != "", ev.Locality != "", ev.Ownership == kvevents.OwnedByRunner, ev.SessionID != "")
		}
		b = appendMapLen(b, n)
		b = appendStr(b, kvevents.KeyType)
		b = appendStr(b, kvevents.TagStored)
	}
	key := func(k string) {
		if isMap {
			b = appendStr(b, k)
		}
	}
	key(kvevents.KeyBlockHashes)
	b = appendArrayLen(b, len(ev.BlockHashes))
	for _, h := range ev.BlockHashes {
		b = appendHash(b, h, sglang)
	}
	key(kvevents.KeyParent)
	if ev.HasParent {
		b = appendHash(b, ev.ParentHash, sglang)
	} else {
		b = append(b, 0xc0)
	}
	key(kvevents.KeyTokenIDs)
	b = appendArrayLen(b, len(ev.TokenIDs))
	for _, t := range ev.TokenIDs {
		b = appendUint(b, uint64(t))
	}
	key(kvevents.KeyBlockSize)
	b = appendUint(b, uint64(ev.BlockSize))
	key(kvevents.KeyLoRAID)
	if ev.HasLoRAID {
		b = appendInt(b, ev.LoRAID)
	} else {
		b = append(b, 0xc0)
	}
	key(kvevents.KeyMedium)
	b = appendStr(b, medium)
	switch e.Format {
	case SGLangArray:
		if ev.CacheSalt != "" {
			b = append(b, 0x81)
			b = appendStr(b, kvevents.KeyCacheSalt)
			b = appendStr(b, ev.CacheSalt)
		}
	case SGLangMap:
		b = appendOptStr(b, kvevents.KeyCacheSalt, ev.CacheSalt)
		b = appendOptStr(b, kvevents.KeySessionID, ev.SessionID)
		b = appendOptStr(b, kvevents.KeyLoRAName, ev.LoRAName)
	default:
		key(kvevents.KeyLoRAName)
		b = appendNilStr(b, ev.LoRAName)
		// vLLM sends one extra-keys entry per block: nil, or the keys it
		// hashed with the block's tokens: the LoRA name on every block of
		// an adapter's request, then on a salted request's root block the
		// salt.
		key(kvevents.KeyExtraKeys)
		b = appendArrayLen(b, len(ev.BlockHashes))
		for i := range ev.BlockHashes {
			salted := i == 0 && ev.CacheSalt != ""
			switch {
			case salted && ev.LoRAName != "":
				b = appendStr(appendStr(appendArrayLen(b, 2), ev.LoRAName), ev.CacheSalt)
			case salted:
				b = appendStr(appendArrayLen(b, 1), ev.CacheSalt)
			case ev.LoRAName != "":
				b = appendStr(appendArrayLen(b, 1), ev.LoRAName)
			default:
				b = append(b, 0xc0)
			}
		}
		key(kvevents.KeyGroupIdx)
		b = appendInt(b, int64(ev.GroupIdx))
		if e.Format == VLLMArray {
			b = appendNilStr(b, ev.SpecKind)
			b = append(b, 0xc0) // sliding window, not kept
			break
		}
		b = appendOptStr(b, kvevents.KeySpecKind, ev.SpecKind)
		b = appendOptStr(b, kvevents.KeyLocality, ev.Locality)
		if ev.Ownership == kvevents.OwnedByRunner {
			b = appendOptStr(b, kvevents.KeyOwnership, kvevents.OwnerKVCR)
		}
		b = appendOptStr(b, kvevents.KeySessionID, ev.SessionID)
	}
	return b, nil
}

func (e *Encoder) appendRemoved(b []byte, ev *kvevents.Event, sglang bool) ([]byte, error) {
	medium, err := e.medium(ev)
	if err != nil {
		return b, err
	}
	switch e.Format {
	case VLLMArray:
		b = appendStr(append(b, 0x94), kvevents.TagRemoved)
	case SGLangArray:
		b = appendStr(append(b, 0x93), kvevents.TagRemoved)
	case SGLangMap:
		b = appendStr(appendStr(append(b, 0x83), kvevents.KeyType), kvevents.TagRemoved)
	default:
		n := 4 + count(ev.Locality != "", ev.Ownership == kvevents.OwnedByRunner)
		b = appendStr(appendStr(appendMapLen(b, n), kvevents.KeyType), kvevents.TagRemoved)
	}
	isMap := e.Format == VLLMMap || e.Format == SGLangMap
	if isMap {
		b = appendStr(b, kvevents.KeyBlockHashes)
	}
	b = appendArrayLen(b, len(ev.BlockHashes))
	for _, h := range ev.BlockHashes {
		b = appendHash(b, h, sglang)
	}
	if isMap {
		b = appendStr(b, kvevents.KeyMedium)
	}
	b = appendStr(b, medium)
	if sglang {
		return b, nil
	}
	if isMap {
		b = appendStr(b, kvevents.KeyGroupIdx)
	}
	b = appendInt(b, int64(ev.GroupIdx))
	if e.Format == VLLMMap {
		b = appendOptStr(b, kvevents.KeyLocality, ev.Locality)
		if ev.Ownership == kvevents.OwnedByRunner {
			b = appendOptStr(b, kvevents.KeyOwnership, kvevents.OwnerKVCR)
		}
	}
	return b, nil
}

func count(conds ...bool) int {
	n := 0
	for _, c := range conds {
		if c {
			n++
		}
	}
	return n
}

// appendHash writes a block hash: unsigned for vLLM, signed for SGLang,
// which publishes the first 8 digest bytes as a Python int64.
func appendHash(b []byte, h uint64, signed bool) []byte {
	if signed {
		return appendInt(b, int64(h))
	}
	return appendUint(b, h)
}

func appendUint(b []byte, v uint64) []byte {
	switch {
	case v <= 0x7f:
		return append(b, byte(v))
	case v <= 0xff:
		return append(b, 0xcc, byte(v))
	case v <= 0xffff:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(v))
	case v <= 0xffffffff:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
}

// appendInt writes v as msgpack-python does: non-negative values unsigned.
func appendInt(b []byte, v int64) []byte {
	switch {
	case v >= 0:
		return appendUint(b, uint64(v))
	case v >= -32:
		return append(b, byte(v))
	case v >= math.MinInt8:
		return append(b, 0xd0, byte(v))
	case v >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, 0xd1), uint16(v))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, 0xd2), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(v))
}

func appendFloat(b []byte, f float64) []byte {
	return binary.BigEndian.AppendUint64(append(b, 0xcb), math.Float64bits(f))
}

func appendStr(b []byte, s string) []byte {
	switch n := len(s); {
	case n <= 31:
		b = append(b, 0xa0|byte(n))
	case n <= 0xff:
		b = append(b, 0xd9, byte(n))
	case n <= 0xffff:
		b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n))
	}
	return append(b, s...)
}

// appendNilStr writes s, or nil when s is "".
func appendNilStr(b []byte, s string) []byte {
	if s == "" {
		return append(b, 0xc0)
	}
	return appendStr(b, s)
}

// appendOptStr writes the key and s, or nothing when s is "" (a field with
// a default, omitted when unset).
func appendOptStr(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return appendStr(appendStr(b, key), s)
}

func appendArrayLen(b []byte, n int) []byte {
	switch {
	case n <= 15:
		return append(b, 0x90|byte(n))
	case n <= 0xffff:
		return binary.BigEndian.AppendUint16(append(b, 0xdc), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xdd), uint32(n))
}

func appendMapLen(b []byte, n int) []byte {
	switch {
	case n <= 15:
		return append(b, 0x80|byte(n))
	case n <= 0xffff:
		return binary.BigEndian.AppendUint16(append(b, 0xde), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xdf), uint32(n))
}
