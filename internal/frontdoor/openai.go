// This file holds the parsing of OpenAI request bodies: what routing reads, as engines read it.

package frontdoor

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"unicode/utf8"

	"kvrouter/internal/hints"
	"kvrouter/internal/rawjson"
	"kvrouter/internal/tokenizer"
)

// ErrBadRequest marks a request body the router cannot route; the message
// names the field to fix.
var ErrBadRequest = errors.New("bad request")

// Kind is the OpenAI endpoint a request came in on.
type Kind uint8

const (
	KindCompletion Kind = iota // POST /v1/completions
	KindChat                   // POST /v1/chat/completions
)

// Request is what routing reads from an inference request body. The body
// itself is forwarded as the client wrote it (less any hints).
type Request struct {
	Kind  Kind
	Model string
	Salt  string // cache_salt
	// Stream and IncludeUsage as the client asked.
	Stream       bool
	IncludeUsage bool

	// Completions: the prompt as text, or as token ids when the client
	// sent ids (HasTokens).
	Prompt    string
	Tokens    []uint32
	HasTokens bool

	// Chat: the messages flattened to text, and as sent (for an engine's
	// /tokenize). Unrenderable content (images) leaves Messages nil.
	Messages            []tokenizer.Message
	RawMessages         json.RawMessage
	AddGenerationPrompt bool

	// top is the body's top-level members by (unescaped) key, as parsed:
	// what the forwarded body's edits need to know of it.
	top map[string]json.RawMessage
	// context is the model's context in tokens (0: unknown), for a
	// tokenizer to refuse a text too long for it before encoding it.
	context int
}

// Members routing reads, matched exactly as engines (Python's json) do:
// case-sensitive, the last of repeated keys winning. encoding/json's struct
// decoding would match "Model" too and route on what the engine ignores.
const (
	keyModel        = "model"
	keyPrompt       = "prompt"
	keyMessages     = "messages"
	keyCacheSalt    = "cache_salt"
	keyStream       = "stream"
	keyAddGenPrompt = "add_generation_prompt"
	keyRole         = "role"
	keyContent      = "content"
)

// parseRequest reads what routing needs from an inference request body.
func parseRequest(kind Kind, body []byte) (*Request, error) {
	if !rawjson.Valid(body) {
		return nil, fmt.Errorf("%w: body is not valid JSON", ErrBadRequest)
	}
	return parseValid(kind, body)
}

// parseValid is parseRequest on a body already validated (by hints.Strip):
// a long prompt makes every pass over it count.
func parseValid(kind Kind, body []byte) (*Request, error) {
	w, ok := members(body)
	if !ok {
		return nil, fmt.Errorf("%w: body is not a JSON object", ErrBadRequest)
	}
	return parseMembers(kind, w, nil)
}

// parseClean reads a body in one pass, validating it and its prompt's
// token ids at once, when that is all there is to do: a valid object that
// carries nothing hints.Strip or dropOwned would remove and parses without
// error. ok
// false leaves the body to the full path (Strip, then parseValid), which
// gives the same answer and the errors. The ids are read over ids' memory.
func parseClean(kind Kind, body []byte, ids []uint32) (req *Request, ok bool) {
	// Members come in order: the ids kept are those of the last prompt,
	// the one that counts (nil when it is not plain ids).
	var tokens []uint32
	ms, ok := rawjson.ScanObject(make([]rawjson.Member, 0, 8), body, func(key string, b []byte, i int) int {
		if key != keyPrompt || kind != KindCompletion {
			return -1
		}
		out, end, ok := plainTokenIDsAt(ids, b, i)
		if tokens = out; !ok {
			return -1
		}
		return end
	})
	if !ok {
		return nil, false
	}
	w := make(map[string]json.RawMessage, len(ms))
	for _, m := range ms {
		if hints.MayHold(m.Key) || routerOwned(m.Key) {
			return nil, false
		}
		w[m.Key] = m.Value
	}
	req, err := parseMembers(kind, w, tokens)
	return req, err == nil
}

// parseMembers reads a request from its top-level members; tokens, when
// set, are the prompt's ids already read.
func parseMembers(kind Kind, w map[string]json.RawMessage, tokens []uint32) (*Request, error) {
	req := &Request{Kind: kind, AddGenerationPrompt: true, top: w}
	var err error
	if req.Model, err = str(w[keyModel], keyModel, true); err != nil {
		return nil, err
	}
	if req.Salt, err = str(w[keyCacheSalt], keyCacheSalt, false); err != nil {
		return nil, err
	}
	if req.Stream, err = boolean(w[keyStream], keyStream, false); err != nil {
		return nil, err
	}
	if so := w[keyStreamOptions]; len(so) > 0 && !isNull(so) {
		opts, ok := members(so)
		if !ok {
			return nil, fmt.Errorf("%w: stream_options: want an object", ErrBadRequest)
		}
		if req.IncludeUsage, err = boolean(opts[keyIncludeUsage], "stream_options.include_usage", false); err != nil {
			return nil, err
		}
	}
	switch kind {
	case KindCompletion:
		p := w[keyPrompt]
		if len(p) == 0 || isNull(p) {
			return nil, fmt.Errorf("%w: prompt is required", ErrBadRequest)
		}
		if err := req.parsePrompt(p, tokens); err != nil {
			return nil, err
		}
	case KindChat:
		if req.AddGenerationPrompt, err = boolean(w[keyAddGenPrompt], keyAddGenPrompt, true); err != nil {
			return nil, err
		}
		if err := req.parseMessages(w[keyMessages]); err != nil {
			return nil, err
		}
	}
	return req, nil
}

// parsePrompt accepts the four prompt shapes of /v1/completions: a string,
// a list of strings, token ids, a list of token id lists. A batch goes to
// one worker, so it is routed by its first prompt.
func (r *Request) parsePrompt(raw json.RawMessage, tokens []uint32) error {
	if raw[0] == '"' {
		return unmarshalString(raw, &r.Prompt)
	}
	// Only the first item matters: no need to split a long list of ids.
	first, ok := firstElement(raw)
	if !ok {
		return fmt.Errorf("%w: prompt: want a string, a list of strings, token ids or lists of token ids", ErrBadRequest)
	}
	if first == nil {
		return fmt.Errorf("%w: prompt is empty", ErrBadRequest)
	}
	switch first[0] {
	case '"':
		if err := unmarshalString(first, &r.Prompt); err != nil {
			return fmt.Errorf("%w: prompt[0]: %v", ErrBadRequest, err)
		}
		return nil
	case '[':
		var err error
		r.Tokens, err = tokenIDs(first, "prompt[0]")
		r.HasTokens = true
		return err
	}
	r.HasTokens = true
	if tokens != nil {
		r.Tokens = tokens
		return nil
	}
	var err error
	r.Tokens, err = tokenIDs(raw, "prompt")
	return err
}

func tokenIDs(raw json.RawMessage, field string) ([]uint32, error) {
	if out, ok := plainTokenIDs(raw); ok {
		return out, nil
	}
	return decodeTokenIDs(raw, field)
}

// decodeTokenIDs is tokenIDs through the decoder, for whatever the fast
// path leaves.
func decodeTokenIDs(raw json.RawMessage, field string) ([]uint32, error) {
	var nums []json.Number
	if err := unmarshalNumbers(raw, &nums); err != nil {
		return nil, fmt.Errorf("%w: %s: want a list of token ids", ErrBadRequest, field)
	}
	out := make([]uint32, len(nums))
	for i, n := range nums {
		v, err := n.Int64()
		if err != nil || v < 0 || v > math.MaxUint32 {
			return nil, fmt.Errorf("%w: %s[%d] = %s: want a token id in [0, 2^32)", ErrBadRequest, field, i, n)
		}
		out[i] = uint32(v)
	}
	return out, nil
}

// plainTokenIDs reads raw, part of a valid JSON document, in one pass when
// it is a list of plain decimal integers below 2^32, which is what clients
// send; ok false leaves anything else (1.0, 1e0, -0, an id too large, not a
// list) to the decoder, whose errors name the offending id. The decoder
// took a quarter of the router's CPU on id prompts.
func plainTokenIDs(raw []byte) (out []uint32, ok bool) {
	i := rawjson.SkipSpace(raw, 0)
	out, end, ok := plainTokenIDsAt(nil, raw, i)
	if !ok || rawjson.SkipSpace(raw, end) != len(raw) {
		return nil, false
	}
	return out, true
}

// plainTokenIDsAt reads such a list starting at b[i], over dst's memory,
// and returns the offset just past it. It accepts only valid JSON (no
// leading zeros), so what it reads needs no other validation.
func plainTokenIDsAt(dst []uint32, b []byte, i int) (out []uint32, end int, ok bool) {
	if i >= len(b) || b[i] != '[' {
		return nil, 0, false
	}
	n := bytes.IndexByte(b[i:], ']')
	if n < 0 {
		return nil, 0, false
	}
	if out = dst[:0]; cap(out) == 0 {
		// Sized by the commas up to the list's end (a list of numbers
		// has no nested bracket): one allocation.
		out = make([]uint32, 0, bytes.Count(b[i:i+n], []byte{','})+1)
	}
	if i = rawjson.SkipSpace(b, i+1); i < len(b) && b[i] == ']' {
		return out, i + 1, true
	}
	for i < len(b) {
		// The usual "1,2,3": an id of up to seven digits and its comma
		// read from one load, the comma found in the same word, so the
		// next id's load waits only on this one's length.
		for i+8 <= len(b) {
			w := binary.LittleEndian.Uint64(b[i:])
			// The first comma's byte: a zero byte of w^commas, found
			// exactly (borrows only spoil the bytes above it). The
			// digits before it are checked off the path to the next id.
			x := w ^ 0x2C2C2C2C2C2C2C2C
			n := bits.TrailingZeros64((x-0x0101010101010101)&^x&0x8080808080808080) >> 3
			if n == 0 || n == 8 || digitRun(w) != n || (n > 1 && byte(w) == '0') {
				break
			}
			out = append(out, eightDigits(w<<(64-8*n)))
			i += n + 1
		}
		// The same for ", ", as Python's json.dumps writes: the space is
		// checked apart from the chain from one id's length to the next
		// load, so the loop above keeps its pace. (The two loops share
		// their body by copy: as a function it is past the inliner's
		// budget, and a call per id costs more than the id.)
		for i+8 <= len(b) && b[i] == ' ' {
			w := binary.LittleEndian.Uint64(b[i:]) >> 8
			x := w ^ 0x2C2C2C2C2C2C2C2C
			n := bits.TrailingZeros64((x-0x0101010101010101)&^x&0x8080808080808080) >> 3
			if n == 0 || n == 8 || digitRun(w) != n || (n > 1 && byte(w) == '0') {
				break
			}
			out = append(out, eightDigits(w<<(64-8*n)))
			i += n + 2
		}
		// Anything else a byte at a time: whitespace, the last id, an id
		// of eight or more digits, or what is not an id at all.
		if i = rawjson.SkipSpace(b, i); i >= len(b) {
			return nil, 0, false
		}
		var v uint64
		start := i
		for ; i < len(b); i++ {
			d := b[i] - '0'
			if d > 9 {
				break
			}
			v = v*10 + uint64(d)
		}
		// Ten digits cannot overflow v; more are too large anyway.
		if i == start || i-start > 10 || v > math.MaxUint32 || (b[start] == '0' && i-start > 1) {
			return nil, 0, false
		}
		out = append(out, uint32(v))
		if i = rawjson.SkipSpace(b, i); i >= len(b) {
			return nil, 0, false
		}
		switch b[i] {
		case ',':
			i++
		case ']':
			return out, i + 1, true
		default:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// digitRun is how many of w's bytes, from the lowest (the first in
// memory), are ASCII digits before the first that is not: 0 to 8.
func digitRun(w uint64) int {
	const (
		hi  = 0xF0F0F0F0F0F0F0F0
		six = 0x0606060606060606
		thr = 0x3030303030303030
	)
	// A digit is 0x30-0x39: its high nibble is 3, and still 3 after
	// adding 6. A carry out of a non-digit byte can only spoil the bytes
	// after it, which do not count.
	nd := ((w & hi) ^ thr) | (((w + six) & hi) ^ thr)
	// A nonzero nibble (1-15) plus 0x7F sets the byte's top bit.
	mask := ((nd >> 4) + 0x7F7F7F7F7F7F7F7F) & 0x8080808080808080
	return bits.TrailingZeros64(mask) >> 3
}

// eightDigits converts eight ASCII digits, the first in the lowest byte,
// in three multiplications; zero bytes below the digits read as leading
// zeros.
func eightDigits(w uint64) uint32 {
	w = (w & 0x0F0F0F0F0F0F0F0F) * 2561 >> 8
	w = (w & 0x00FF00FF00FF00FF) * 6553601 >> 16
	return uint32((w & 0x0000FFFF0000FFFF) * 42949672960001 >> 32)
}

func (r *Request) parseMessages(raw json.RawMessage) error {
	if len(raw) == 0 || isNull(raw) {
		return fmt.Errorf("%w: messages is required", ErrBadRequest)
	}
	elems, ok := elements(raw)
	if !ok {
		return fmt.Errorf("%w: messages: want a list of {role, content}", ErrBadRequest)
	}
	if len(elems) == 0 {
		return fmt.Errorf("%w: messages is empty", ErrBadRequest)
	}
	r.RawMessages = raw
	out := make([]tokenizer.Message, len(elems))
	for i, e := range elems {
		m, ok := members(e)
		if !ok {
			return fmt.Errorf("%w: messages[%d]: want an object {role, content}", ErrBadRequest, i)
		}
		role, err := str(m[keyRole], fmt.Sprintf("messages[%d].role", i), true)
		if err != nil {
			return err
		}
		text, err := flatten(m[keyContent])
		if errors.Is(err, tokenizer.ErrUnsupportedContent) {
			// Images and the like: the engine renders them, the router
			// cannot, so it routes on load alone.
			r.Messages = nil
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: messages[%d].content: %v", ErrBadRequest, i, err)
		}
		out[i] = tokenizer.Message{Role: role, Content: text}
	}
	r.Messages = out
	return nil
}

// unmarshalNumbers decodes keeping numbers as written, so that 1.0 and 1e0
// are seen for what they are.
func unmarshalNumbers(raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return dec.Decode(v)
}

// flatten is tokenizer.FlattenContent with a fast path for the common
// case, a plain string without escapes, which needs no decoding pass.
func flatten(raw json.RawMessage) (string, error) {
	if len(raw) >= 2 && raw[0] == '"' && bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return string(raw[1 : len(raw)-1]), nil
	}
	return tokenizer.FlattenContent(raw)
}

// members maps the members of a JSON object (part of a valid document) to
// their raw values without decoding them: a prompt is read once, not once
// per level. Keys are unescaped; the last of repeated keys wins.
func members(b []byte) (map[string]json.RawMessage, bool) {
	i := rawjson.SkipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	var buf [16]rawjson.Member
	ms, _ := rawjson.Members(buf[:0], b, i)
	out := make(map[string]json.RawMessage, len(ms))
	for _, m := range ms {
		out[m.Key] = m.Value
	}
	return out, true
}

// firstElement returns the first value of a JSON array (part of a valid
// document), nil for an empty one; ok is false for anything but an array.
func firstElement(b []byte) (json.RawMessage, bool) {
	i := rawjson.SkipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return nil, false
	}
	if i = rawjson.SkipSpace(b, i+1); b[i] == ']' {
		return nil, true
	}
	return b[i:rawjson.SkipValue(b, i)], true
}

// elements splits a JSON array (part of a valid document) into raw values.
func elements(b []byte) ([][]byte, bool) {
	i := rawjson.SkipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return nil, false
	}
	out, _ := rawjson.Elements(nil, b, i)
	return out, true
}

func isNull(raw json.RawMessage) bool { return string(raw) == "null" }

func str(raw json.RawMessage, field string, required bool) (string, error) {
	if len(raw) == 0 || isNull(raw) {
		if required {
			return "", fmt.Errorf("%w: %s is required", ErrBadRequest, field)
		}
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("%w: %s: want a string", ErrBadRequest, field)
	}
	if s == "" && required {
		return "", fmt.Errorf("%w: %s is empty", ErrBadRequest, field)
	}
	return s, nil
}

func boolean(raw json.RawMessage, field string, def bool) (bool, error) {
	if len(raw) == 0 || isNull(raw) {
		return def, nil
	}
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		return false, fmt.Errorf("%w: %s: want true or false", ErrBadRequest, field)
	}
	return b, nil
}

// guessKind picks the endpoint a /debug/route body was meant for.
func guessKind(body []byte) Kind {
	if !rawjson.Valid(body) {
		return KindCompletion
	}
	if m, ok := members(body); ok && len(m[keyMessages]) > 0 && !isNull(m[keyMessages]) {
		return KindChat
	}
	return KindCompletion
}
