package workload

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestReadMooncake(t *testing.T) {
	type want struct {
		id        string
		session   string
		turn      int
		arrival   time.Duration
		promptLen int
		maxTokens int
	}
	tests := []struct {
		name  string
		trace string
		opts  MooncakeOptions
		want  []want
	}{{
		name:  "one line",
		trace: `{"timestamp": 0, "input_length": 1000, "output_length": 20, "hash_ids": [7, 8]}`,
		want:  []want{{"mooncake-1", "", 0, 0, 1000, 20}},
	}, {
		name: "arrivals are offsets from the earliest timestamp, sorted, ties in line order",
		trace: `{"timestamp": 5000, "input_length": 512, "output_length": 1, "hash_ids": [1]}
{"timestamp": 3000, "input_length": 513, "output_length": 2, "hash_ids": [1, 2]}
{"timestamp": 5000, "input_length": 10, "output_length": 3, "hash_ids": [9]}
`,
		want: []want{
			{"mooncake-2", "", 0, 0, 513, 2},
			{"mooncake-1", "", 0, 2 * time.Second, 512, 1},
			{"mooncake-3", "", 0, 2 * time.Second, 10, 3},
		},
	}, {
		name: "time scale compresses arrivals; fractional milliseconds kept",
		trace: `{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]}
{"timestamp": 1000.5, "input_length": 1, "output_length": 1, "hash_ids": [1]}`,
		opts: MooncakeOptions{TimeScale: 4},
		want: []want{{"mooncake-1", "", 0, 0, 1, 1}, {"mooncake-2", "", 0, 250125 * time.Microsecond, 1, 1}},
	}, {
		name: "blank lines, a BOM and CRLF endings are not requests; ids count physical lines",
		trace: "\xef\xbb\xbf\n" + `{"timestamp": 1, "input_length": 4, "output_length": 1, "hash_ids": [1]}` + "\r\n   \n\t\n" +
			`{"timestamp": 2, "input_length": 4, "output_length": 1, "hash_ids": [1]}` + "\r\n",
		want: []want{{"mooncake-2", "", 0, 0, 4, 1}, {"mooncake-5", "", 0, time.Millisecond, 4, 1}},
	}, {
		name: "session ids, strings or integers, number turns in arrival order",
		trace: `{"timestamp": 900, "input_length": 3, "output_length": 1, "hash_ids": [1], "session_id": "a"}
{"timestamp": 100, "input_length": 2, "output_length": 1, "hash_ids": [1], "session_id": "a"}
{"timestamp": 200, "input_length": 2, "output_length": 1, "hash_ids": [5], "session_id": 42}
{"timestamp": 300, "input_length": 2, "output_length": 1, "hash_ids": [5], "session_id": "42"}`,
		want: []want{
			{"mooncake-2", "a", 0, 0, 2, 1},
			{"mooncake-3", "42", 0, 100 * time.Millisecond, 2, 1},
			{"mooncake-4", "42", 1, 200 * time.Millisecond, 2, 1},
			{"mooncake-1", "a", 1, 800 * time.Millisecond, 3, 1},
		},
	}, {
		name: "max requests counts lines read, and later lines are not even checked",
		trace: `{"timestamp": 9, "input_length": 1, "output_length": 1, "hash_ids": [1]}
{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [2]}
not json`,
		opts: MooncakeOptions{MaxRequests: 2},
		want: []want{{"mooncake-2", "", 0, 0, 1, 1}, {"mooncake-1", "", 0, 9 * time.Millisecond, 1, 1}},
	}, {
		name:  "block size option",
		trace: `{"timestamp": 0, "input_length": 33, "output_length": 1, "hash_ids": [1, 2, 3]}`,
		opts:  MooncakeOptions{BlockTokens: 16},
		want:  []want{{"mooncake-1", "", 0, 0, 33, 1}},
	}, {
		name:  "empty trace",
		trace: "\n\n",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reqs, err := ReadMooncake(strings.NewReader(tt.trace), tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			var got []want
			for _, r := range reqs {
				got = append(got, want{r.ID, r.Session, r.Turn, r.Arrival, len(r.Prompt), r.MaxTokens})
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// Prompts are made of hash blocks: equal ids give equal tokens, different
// ids different tokens, a cut block is a prefix of the whole one, and every
// token is inside the vocabulary.
func TestMooncakePromptBlocks(t *testing.T) {
	trace := `{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [10, 11]}
{"timestamp": 1, "input_length": 1300, "output_length": 1, "hash_ids": [10, 11, 12]}
{"timestamp": 2, "input_length": 700, "output_length": 1, "hash_ids": [10, 13]}
{"timestamp": 3, "input_length": 100, "output_length": 1, "hash_ids": [12]}`
	for _, vocab := range []Vocab{{}, {Lo: 5, Hi: 7}, {Lo: 0, Hi: 1 << 31}} {
		reqs, err := ReadMooncake(strings.NewReader(trace), MooncakeOptions{Vocab: vocab})
		if err != nil {
			t.Fatal(err)
		}
		a, b, c, d := reqs[0].Prompt, reqs[1].Prompt, reqs[2].Prompt, reqs[3].Prompt
		if !slices.Equal(a, b[:1024]) {
			t.Errorf("vocab %v: same ids [10 11], different tokens", vocab)
		}
		if !slices.Equal(a[:512], c[:512]) {
			t.Errorf("vocab %v: same id 10, different tokens", vocab)
		}
		if !slices.Equal(b[1024:1124], d) {
			t.Errorf("vocab %v: block 12 cut to 276 and to 100 tokens disagree", vocab)
		}
		if vocab.Hi-vocab.Lo > 1000 && slices.Equal(a[512:700], c[512:]) {
			t.Errorf("vocab %v: ids 11 and 13 give the same tokens", vocab)
		}
		v := vocab.orDefault()
		for _, r := range reqs {
			for _, tok := range r.Prompt {
				if tok < v.Lo || tok >= v.Hi {
					t.Fatalf("vocab %v: token %d outside", vocab, tok)
				}
			}
		}
	}
}

// The token stream of a block is part of the workload's definition: a
// change here changes every replay, so it must be deliberate.
func TestBlockTokensPinned(t *testing.T) {
	pinned := map[uint64][]uint32{
		0: {21030, 17143, 28966, 6673},
		1: {1292, 24522, 3672, 14717},
	}
	for id, want := range pinned {
		if got := appendBlock(nil, id, len(want), DefaultVocab); !slices.Equal(got, want) {
			t.Errorf("block %d starts %v, pinned %v", id, got, want)
		}
	}
}

func TestReadMooncakeErrors(t *testing.T) {
	const ok = `{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]}` + "\n"
	tests := []struct {
		name  string
		trace string
		line  int
		field string
		msg   string
	}{
		{"not json", ok + "{", 2, "", "not a JSON object"},
		{"array", `[1]`, 1, "", "not a JSON object"},
		{"null", "null", 1, "", "not a JSON object"},
		{"unterminated", `{"timestamp": 0`, 1, "", "not a JSON object"},
		{"bad value", `{"timestamp": [1,]}`, 1, "timestamp", "not JSON"},
		{"duplicate key", `{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1], "timestamp": 3}`, 1, "timestamp", "appears twice"},
		{"two values", `{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]} {}`, 1, "", "more than one JSON value"},
		{"unknown key", `{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1], "hash_id": [1]}`, 1, "hash_id", "unknown key"},
		{"key case matters", `{"Timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]}`, 1, "Timestamp", "unknown key"},
		{"missing timestamp", `{"input_length": 1, "output_length": 1, "hash_ids": [1]}`, 1, "timestamp", "missing"},
		{"missing hash ids", ok + ok + `{"timestamp": 0, "input_length": 1, "output_length": 1}`, 3, "hash_ids", "missing"},
		{"null timestamp", `{"timestamp": null, "input_length": 1, "output_length": 1, "hash_ids": [1]}`, 1, "timestamp", "null"},
		{"negative timestamp", `{"timestamp": -1, "input_length": 1, "output_length": 1, "hash_ids": [1]}`, 1, "timestamp", "non-negative"},
		{"string timestamp", `{"timestamp": "0", "input_length": 1, "output_length": 1, "hash_ids": [1]}`, 1, "timestamp", "non-negative"},
		{"zero input", `{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": []}`, 1, "input_length", "[1, 2097152]"},
		{"fractional input", `{"timestamp": 0, "input_length": 1.5, "output_length": 1, "hash_ids": [1]}`, 1, "input_length", "not an integer"},
		{"huge input", `{"timestamp": 0, "input_length": 3000000, "output_length": 1, "hash_ids": [1]}`, 1, "input_length", "not an integer"},
		{"zero output", `{"timestamp": 0, "input_length": 1, "output_length": 0, "hash_ids": [1]}`, 1, "output_length", "not an integer"},
		{"negative hash id", `{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [-1]}`, 1, "hash_ids", "non-negative integers"},
		{"hash ids not a list", `{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": 1}`, 1, "hash_ids", "non-negative integers"},
		{"too few hash ids", `{"timestamp": 0, "input_length": 513, "output_length": 1, "hash_ids": [1]}`, 1, "hash_ids", "1 ids, but input_length 513 at 512 tokens per block needs 2"},
		{"too many hash ids", `{"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [1, 2]}`, 1, "hash_ids", "needs 1"},
		{"empty session", `{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1], "session_id": ""}`, 1, "session_id", "empty"},
		{"bool session", `{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1], "session_id": true}`, 1, "session_id", "neither"},
		{"after blank lines", ok + "\n\n" + `{"timestamp": 0}`, 4, "input_length", "missing"},
		{"timestamp overflows a duration", `{"timestamp": 1e300, "input_length": 1, "output_length": 1, "hash_ids": [1]}` + "\n" + ok, 1, "timestamp", "too far"},
		{"line too long", ok + strings.Repeat(" ", maxLineBytes+1), 2, "", "longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadMooncake(strings.NewReader(tt.trace), MooncakeOptions{})
			var le *LineError
			if !errors.As(err, &le) || !errors.Is(err, ErrTrace) {
				t.Fatalf("got %v, want a LineError", err)
			}
			if le.Line != tt.line || le.Field != tt.field || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("got line %d field %q: %v\nwant line %d field %q containing %q", le.Line, le.Field, err, tt.line, tt.field, tt.msg)
			}
		})
	}
}

func TestMooncakeOptionsErrors(t *testing.T) {
	tests := []struct {
		opts  MooncakeOptions
		field string
	}{
		{MooncakeOptions{BlockTokens: -1}, "BlockTokens"},
		{MooncakeOptions{TimeScale: -2}, "TimeScale"},
		{MooncakeOptions{MaxRequests: -1}, "MaxRequests"},
		{MooncakeOptions{Vocab: Vocab{Lo: 5, Hi: 5}}, "Vocab"},
	}
	for _, tt := range tests {
		_, err := ReadMooncake(strings.NewReader(""), tt.opts)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "MooncakeOptions."+tt.field) {
			t.Errorf("%+v: got %v, want ErrConfig naming %s", tt.opts, err, tt.field)
		}
	}
}
