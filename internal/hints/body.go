// This file holds hints in request bodies: placements, Attach and Strip by edit, Extract.

package hints

import (
	"bytes"
	"errors"
	"fmt"

	"kvrouter/internal/rawjson"
)

// ErrBadBody marks a request body a hint cannot be placed in or stripped
// from.
var ErrBadBody = errors.New("hints: bad request body")

// Placement is where a worker's engine reads hints in a request body.
type Placement uint8

const (
	PlaceVLLM      Placement = iota // kv_transfer_params.kv_hint, envelope
	PlaceVLLMOld                    // kv_transfer_params.router_hint, flat
	PlaceSGLang                     // top-level kv_hints, envelope
	PlaceSGLangOld                  // top-level kv_router_hint, flat
)

var placementNames = [...]string{
	PlaceVLLM:      placementVLLM,
	PlaceVLLMOld:   placementVLLMOld,
	PlaceSGLang:    placementSGLang,
	PlaceSGLangOld: placementSGLangOld,
}

func (p Placement) String() string {
	if int(p) < len(placementNames) {
		return placementNames[p]
	}
	return "unknown"
}

// ParsePlacement reads a placement as written in configuration.
func ParsePlacement(s string) (Placement, error) {
	for p, name := range placementNames {
		if s == name {
			return Placement(p), nil
		}
	}
	return 0, fmt.Errorf("hints: placement %q: want one of %q", s, placementNames)
}

// key returns the hint's member name, whether it sits inside
// kv_transfer_params rather than at the top level, and whether it holds an
// envelope rather than the flat form.
func (p Placement) key() (key string, nested, envelope bool) {
	switch p {
	case PlaceVLLMOld:
		return keyVLLMHintOld, true, false
	case PlaceSGLang:
		return keySGLangHint, false, true
	case PlaceSGLangOld:
		return keySGLangHintOld, false, false
	}
	return keyVLLMHint, true, true
}

func topLevelHint(key string) bool { return key == keySGLangHint || key == keySGLangHintOld }
func nestedHint(key string) bool   { return key == keyVLLMHint || key == keyVLLMHintOld }

// MayHold reports whether a request body's top-level member key can hold a
// hint that Strip would remove: a body with none of them needs no Strip.
func MayHold(key string) bool { return topLevelHint(key) || key == keyKVTransferParams }

// Strip removes every hint field a client may have put in a request body
// (kv_transfer_params.router_hint, kv_transfer_params.kv_hint, kv_hints,
// kv_router_hint), so that hints only ever name endpoints registered
// workers advertised. Everything else is kept byte for byte, including
// numbers and whitespace. It reports whether anything was removed; when
// nothing was, out is body itself.
func Strip(body []byte) (out []byte, stripped bool, err error) {
	return rewrite(body, nil)
}

// Attach strips client hints from body and places h for request
// messageID where p says the worker's engine reads it.
func Attach(body []byte, p Placement, messageID string, h Hint) ([]byte, error) {
	if err := h.check(); err != nil {
		return nil, err
	}
	key, nested, envelope := p.key()
	var member []byte
	member = appendKey(member, key)
	if envelope {
		member = AppendEnvelope(member, messageID, h)
	} else {
		member = AppendFlat(member, h)
	}
	out, _, err := rewrite(body, &insert{member: member, nested: nested})
	return out, err
}

// insert is a member to add: at the top level, or into the last
// kv_transfer_params (the one Python's json keeps when a key repeats).
type insert struct {
	member []byte
	nested bool
}

func rewrite(body []byte, ins *insert) ([]byte, bool, error) {
	if !rawjson.Valid(body) {
		return nil, false, fmt.Errorf("%w: not valid JSON", ErrBadBody)
	}
	open := rawjson.SkipSpace(body, 0)
	if body[open] != '{' {
		return nil, false, fmt.Errorf("%w: want a JSON object at the top level", ErrBadBody)
	}
	obj := body[open:]         // offsets below are the object's own
	var buf [16]rawjson.Member // on the stack unless the body has more
	top, closing := rawjson.Members(buf[:0], obj, 0)
	obj = obj[:closing+1]
	lastParams := -1
	for i, m := range top {
		if m.Key == keyKVTransferParams {
			lastParams = i
		}
	}
	stripped := false
	var edits []edit
	for i, m := range top {
		switch {
		case topLevelHint(m.Key):
			edits = append(edits, edit{drop: true})
			stripped = true
			continue
		case m.Key != keyKVTransferParams:
			edits = append(edits, edit{})
			continue
		}
		var inner *insert
		if ins != nil && ins.nested && i == lastParams {
			inner = ins
		}
		v, changed, err := rewriteParams(m.Value, inner)
		if err != nil {
			return nil, false, err
		}
		stripped = stripped || changed
		if changed || inner != nil {
			edits = append(edits, edit{value: v, replace: true})
		} else {
			edits = append(edits, edit{})
		}
	}
	var extra []byte
	if ins != nil {
		extra = ins.member
		if ins.nested {
			extra = nil
			if lastParams < 0 {
				extra = appendKey(nil, keyKVTransferParams)
				extra = append(append(extra, '{'), ins.member...)
				extra = append(extra, '}')
			}
		}
	} else if !stripped {
		return body, false, nil
	}
	out := make([]byte, 0, len(body)+len(extra)+32)
	out = append(out, body[:open]...)
	out = writeObject(out, obj, top, edits, extra)
	out = append(out, body[open+closing+1:]...)
	return out, stripped, nil
}

// rewriteParams strips hint keys from a kv_transfer_params value and, when
// ins is set, adds the hint member to it. null turns into an object since
// the engine reads kv_transfer_params as an optional object.
func rewriteParams(v []byte, ins *insert) ([]byte, bool, error) {
	if v[0] != '{' {
		if ins != nil && bytes.Equal(v, []byte("null")) {
			return append(append([]byte{'{'}, ins.member...), '}'), false, nil
		}
		if ins != nil {
			return nil, false, fmt.Errorf("%w: %s: want an object or null to hold the hint", ErrBadBody, keyKVTransferParams)
		}
		return v, false, nil
	}
	var buf [8]rawjson.Member
	ms, _ := rawjson.Members(buf[:0], v, 0)
	edits := make([]edit, len(ms))
	changed := false
	for i, m := range ms {
		if nestedHint(m.Key) {
			edits[i].drop = true
			changed = true
		}
	}
	if !changed && ins == nil {
		return v, false, nil
	}
	var extra []byte
	if ins != nil {
		extra = ins.member
	}
	return writeObject(make([]byte, 0, len(v)+len(extra)), v, ms, edits, extra), changed, nil
}

type edit struct {
	drop    bool
	replace bool
	value   []byte
}

// writeObject appends obj with edits applied to its members and extra (a
// ready "key":value) added last. Separators and whitespace are copied from
// obj: a kept member brings the text between the previous member's end and
// its own value, so dropping members never leaves a stray comma.
func writeObject(dst, obj []byte, ms []rawjson.Member, edits []edit, extra []byte) []byte {
	if len(ms) == 0 {
		dst = append(dst, '{')
		dst = append(dst, extra...)
		return append(dst, obj[1:]...)
	}
	dst = append(dst, obj[:ms[0].Start]...)
	kept := false
	for i, m := range ms {
		e := edits[i]
		if e.drop {
			continue
		}
		from := m.Start
		if kept {
			from = ms[i-1].End
		}
		dst = append(dst, obj[from:m.End-len(m.Value)]...) // up to the value
		if e.replace {
			dst = append(dst, e.value...)
		} else {
			dst = append(dst, m.Value...)
		}
		kept = true
	}
	if extra != nil {
		if kept {
			dst = append(dst, ',')
		}
		dst = append(dst, extra...)
	}
	return append(dst, obj[ms[len(ms)-1].End:]...)
}

// Extract finds the hint an engine reading the placements from, in that
// order of preference, finds in body: where a key repeats, its last
// occurrence (as Python's json keeps). found is false when none of them
// holds a non-null value.
func Extract(body []byte, from ...Placement) (raw []byte, p Placement, found bool, err error) {
	if !rawjson.Valid(body) {
		return nil, 0, false, fmt.Errorf("%w: not valid JSON", ErrBadBody)
	}
	open := rawjson.SkipSpace(body, 0)
	if body[open] != '{' {
		return nil, 0, false, fmt.Errorf("%w: want a JSON object at the top level", ErrBadBody)
	}
	top, _ := rawjson.Members(nil, body, open)
	var inner []rawjson.Member
	if params := last(top, keyKVTransferParams); len(params) > 0 && params[0] == '{' {
		inner, _ = rawjson.Members(nil, params, 0)
	}
	for _, p := range from {
		key, nested, _ := p.key()
		ms := top
		if nested {
			ms = inner
		}
		if v := last(ms, key); v != nil && !bytes.Equal(v, []byte("null")) {
			return v, p, true, nil
		}
	}
	return nil, 0, false, nil
}

// last returns the value of the last member named key, as Python's json
// keeps the last of repeated keys; nil when there is none.
func last(ms []rawjson.Member, key string) []byte {
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].Key == key {
			return ms[i].Value
		}
	}
	return nil
}
