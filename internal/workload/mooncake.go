// This file holds ReadMooncake: a Mooncake trace's JSON lines turned into requests.

package workload

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"
)

// ErrTrace marks a trace that cannot be replayed; the error says which line.
var ErrTrace = errors.New("invalid mooncake trace")

// Mooncake trace keys. session_id is our extension (other replay tools use
// the same name); without it every line is its own conversation.
const (
	keyTimestamp    = "timestamp"
	keyInputLength  = "input_length"
	keyOutputLength = "output_length"
	keyHashIDs      = "hash_ids"
	keySessionID    = "session_id"
)

// Limits that guard memory against a hostile or corrupt trace: a prompt of
// 2M tokens is past any served context window, and a line of 16 MiB holds
// far more hash ids than that.
const (
	maxLengthTokens = 1 << 21
	maxLineBytes    = 16 << 20
)

// MooncakeOptions control how a trace becomes requests. Zero values take
// the defaults.
type MooncakeOptions struct {
	// BlockTokens is how many prompt tokens one hash id stands for
	// (default 512, Mooncake's block size).
	BlockTokens int
	// TimeScale divides arrival offsets: 10 replays the trace ten times
	// faster (default 1).
	TimeScale float64
	// MaxRequests stops after this many requests, counted in line order;
	// 0 reads the whole trace.
	MaxRequests int
	// Vocab is the token id range prompts are drawn from (default
	// DefaultVocab).
	Vocab Vocab
}

func (o MooncakeOptions) withDefaults() (MooncakeOptions, error) {
	switch {
	case o.BlockTokens < 0 || o.BlockTokens > maxLengthTokens:
		return o, fmt.Errorf("%w: MooncakeOptions.BlockTokens: %d is outside [1, %d]", ErrConfig, o.BlockTokens, maxLengthTokens)
	case o.TimeScale < 0 || math.IsNaN(o.TimeScale) || math.IsInf(o.TimeScale, 0):
		return o, fmt.Errorf("%w: MooncakeOptions.TimeScale: %v is not a positive number", ErrConfig, o.TimeScale)
	case o.MaxRequests < 0:
		return o, fmt.Errorf("%w: MooncakeOptions.MaxRequests: %d is negative", ErrConfig, o.MaxRequests)
	}
	if o.BlockTokens == 0 {
		o.BlockTokens = 512
	}
	if o.TimeScale == 0 {
		o.TimeScale = 1
	}
	o.Vocab = o.Vocab.orDefault()
	return o, o.Vocab.check("MooncakeOptions.Vocab")
}

// A LineError reports the trace line, and the key on it, to fix.
type LineError struct {
	Line  int
	Field string // empty when the line as a whole is at fault
	Err   error
}

func (e *LineError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("line %d: %v", e.Line, e.Err)
	}
	return fmt.Sprintf("line %d: %s: %v", e.Line, e.Field, e.Err)
}

func (e *LineError) Unwrap() error { return e.Err }

// Is makes every LineError an ErrTrace.
func (e *LineError) Is(target error) bool { return target == ErrTrace }

// MooncakeLine is one line of a Mooncake trace.
type MooncakeLine struct {
	Timestamp    float64 // milliseconds since the trace's start
	InputLength  int
	OutputLength int
	HashIDs      []uint64
	SessionID    string
}

// ReadMooncake reads a Mooncake trace (JSON lines) and turns each line into
// a request whose prompt is built from its hash ids: block h is 512 tokens
// drawn from a generator seeded by h, the last block cut to input_length,
// so lines that share hash ids share prompt prefixes token for token.
//
// Arrivals are offsets from the earliest timestamp, divided by TimeScale.
// Blank lines are skipped; anything else that is not a valid line is an
// error naming the line, never skipped. Unknown keys are errors too: a
// misspelt session_id would otherwise silently change the replay.
// Each prompt holds input_length tokens of 4 bytes: mind MaxRequests on a
// full production trace.
func ReadMooncake(r io.Reader, opts MooncakeOptions) ([]Request, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLineBytes)
	var (
		lines   []MooncakeLine
		numbers []int
		n       int
	)
	for sc.Scan() {
		n++
		text := sc.Bytes()
		if n == 1 {
			text = bytes.TrimPrefix(text, []byte("\xef\xbb\xbf"))
		}
		if len(bytes.TrimSpace(text)) == 0 {
			continue
		}
		l, err := parseMooncakeLine(text, opts.BlockTokens)
		if err != nil {
			if le, ok := err.(*LineError); ok {
				le.Line = n
			}
			return nil, err
		}
		lines = append(lines, l)
		numbers = append(numbers, n)
		if len(lines) == opts.MaxRequests {
			break
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, &LineError{Line: n + 1, Err: fmt.Errorf("longer than %d bytes", maxLineBytes)}
		}
		return nil, fmt.Errorf("reading mooncake trace: %w", err)
	}
	return mooncakeRequests(lines, numbers, opts)
}

func mooncakeRequests(lines []MooncakeLine, numbers []int, opts MooncakeOptions) ([]Request, error) {
	if len(lines) == 0 {
		return nil, nil
	}
	start := lines[0].Timestamp
	for _, l := range lines {
		start = min(start, l.Timestamp)
	}
	reqs := make([]Request, len(lines))
	for i, l := range lines {
		arrival := (l.Timestamp - start) / opts.TimeScale * float64(time.Millisecond)
		if arrival >= math.MaxInt64 {
			return nil, &LineError{Line: numbers[i], Field: keyTimestamp, Err: fmt.Errorf("%v ms is too far from the first arrival", l.Timestamp)}
		}
		prompt := make([]uint32, 0, l.InputLength)
		for _, h := range l.HashIDs {
			prompt = appendBlock(prompt, h, min(opts.BlockTokens, l.InputLength-len(prompt)), opts.Vocab)
		}
		reqs[i] = Request{
			ID:        "mooncake-" + strconv.Itoa(numbers[i]),
			Session:   l.SessionID,
			Arrival:   time.Duration(arrival),
			Prompt:    prompt,
			MaxTokens: l.OutputLength,
		}
	}
	sortByArrival(reqs)
	turns := map[string]int{}
	for i := range reqs {
		if s := reqs[i].Session; s != "" {
			reqs[i].Turn = turns[s]
			turns[s]++
		}
	}
	return reqs, nil
}

// parseMooncakeLine decodes and checks one line; the caller fills in the
// line number of a *LineError.
func parseMooncakeLine(text []byte, blockTokens int) (MooncakeLine, error) {
	var l MooncakeLine
	fields, err := objectFields(text)
	if err != nil {
		return l, err
	}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		switch k {
		case keyTimestamp, keyInputLength, keyOutputLength, keyHashIDs, keySessionID:
		default:
			return l, &LineError{Field: k, Err: errors.New("unknown key (want timestamp, input_length, output_length, hash_ids and optionally session_id)")}
		}
		if string(fields[k]) == "null" {
			return l, &LineError{Field: k, Err: errors.New("null")}
		}
	}
	for _, k := range []string{keyTimestamp, keyInputLength, keyOutputLength, keyHashIDs} {
		if _, ok := fields[k]; !ok {
			return l, &LineError{Field: k, Err: errors.New("missing")}
		}
	}
	if err := json.Unmarshal(fields[keyTimestamp], &l.Timestamp); err != nil || l.Timestamp < 0 {
		return l, &LineError{Field: keyTimestamp, Err: fmt.Errorf("%s is not a non-negative number of milliseconds", fields[keyTimestamp])}
	}
	if l.InputLength, err = length(fields[keyInputLength]); err != nil {
		return l, &LineError{Field: keyInputLength, Err: err}
	}
	if l.OutputLength, err = length(fields[keyOutputLength]); err != nil {
		return l, &LineError{Field: keyOutputLength, Err: err}
	}
	if err := json.Unmarshal(fields[keyHashIDs], &l.HashIDs); err != nil {
		return l, &LineError{Field: keyHashIDs, Err: errors.New("not a list of non-negative integers")}
	}
	if want := (l.InputLength + blockTokens - 1) / blockTokens; len(l.HashIDs) != want {
		return l, &LineError{Field: keyHashIDs, Err: fmt.Errorf("%d ids, but input_length %d at %d tokens per block needs %d", len(l.HashIDs), l.InputLength, blockTokens, want)}
	}
	if raw, ok := fields[keySessionID]; ok {
		if l.SessionID, err = sessionID(raw); err != nil {
			return l, &LineError{Field: keySessionID, Err: err}
		}
	}
	return l, nil
}

// objectFields splits a line holding one JSON object into its members,
// refusing duplicate keys, which would otherwise silently keep the last.
func objectFields(text []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(text))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, &LineError{Err: errors.New("not a JSON object")}
	}
	fields := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		key, ok := tok.(string)
		if err != nil || !ok {
			return nil, &LineError{Err: fmt.Errorf("not a JSON object: %v", err)}
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, &LineError{Field: key, Err: fmt.Errorf("not JSON: %v", err)}
		}
		if _, dup := fields[key]; dup {
			return nil, &LineError{Field: key, Err: errors.New("appears twice")}
		}
		fields[key] = raw
	}
	if _, err := dec.Token(); err != nil {
		return nil, &LineError{Err: fmt.Errorf("not a JSON object: %v", err)}
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &LineError{Err: errors.New("more than one JSON value")}
	}
	return fields, nil
}

func length(raw json.RawMessage) (int, error) {
	var n int64
	if err := json.Unmarshal(raw, &n); err != nil || n < 1 || n > maxLengthTokens {
		return 0, fmt.Errorf("%s is not an integer in [1, %d]", raw, maxLengthTokens)
	}
	return int(n), nil
}

// sessionID accepts a string or an integer, since traces from other tools
// number their sessions.
func sessionID(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		if s == "" {
			return "", errors.New("empty")
		}
		return s, nil
	}
	var n int64
	if err := json.Unmarshal(raw, &n); err != nil {
		return "", fmt.Errorf("%s is neither a string nor an integer", raw)
	}
	return strconv.FormatInt(n, 10), nil
}
