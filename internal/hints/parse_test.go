package hints

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	const fetch = `{"action_id":"a1","action_type":"kv.fetch","action_version":"1.0","payload":`
	env := func(payload string) string {
		return `{"protocol_version":"0.1","message_id":"m","actions":[` + fetch + payload + `}]}`
	}
	tests := []struct {
		name     string
		in       string
		want     Hint
		flat     bool
		warnings int
		err      error
		field    string // the error must name it
	}{
		{name: "wire.md envelope", in: specEnvelope,
			want: Hint{Endpoint: "tcp://10.0.0.7:25000", BlockHashes: []uint64{11, 22}}},
		{name: "legacy flat form", in: `{"source_control_endpoint":"tcp://h:1","block_hashes":[7]}`,
			want: Hint{Endpoint: "tcp://h:1", BlockHashes: []uint64{7}}, flat: true},
		{name: "unknown actions are skipped",
			in: `{"protocol_version":"0.1","actions":["junk",5,null,{"action_type":"kv.evict","payload":{}},{"action_type":1},` +
				fetch + `{"source_control_endpoint":"tcp://h:1","block_hashes":[1]}}]}`,
			want: Hint{Endpoint: "tcp://h:1", BlockHashes: []uint64{1}}},
		{name: "first kv.fetch wins",
			in: `{"protocol_version":"0.1","actions":[` + fetch + `{"source_control_endpoint":"tcp://a:1","block_hashes":[1]}},` +
				fetch + `{"source_control_endpoint":"tcp://b:1","block_hashes":[2]}}]}`,
			want: Hint{Endpoint: "tcp://a:1", BlockHashes: []uint64{1}}},
		{name: "first kv.fetch wins even when invalid",
			in: `{"protocol_version":"0.1","actions":[` + fetch + `{"source_control_endpoint":"","block_hashes":[1]}},` +
				fetch + `{"source_control_endpoint":"tcp://b:1","block_hashes":[2]}}]}`,
			err: ErrBadSource, field: "actions[0].payload.source_control_endpoint"},
		{name: "newer protocol version warns",
			in:   strings.Replace(env(`{"source_control_endpoint":"tcp://h:1","block_hashes":[1]}`), `"0.1"`, `"0.2"`, 1),
			want: Hint{Endpoint: "tcp://h:1", BlockHashes: []uint64{1}}, warnings: 1},
		{name: "newer action version and no protocol version warn twice",
			in: `{"actions":[{"action_type":"kv.fetch","action_version":"2.0","payload":` +
				`{"source_control_endpoint":"tcp://h:1","block_hashes":[1]}}]}`,
			want: Hint{Endpoint: "tcp://h:1", BlockHashes: []uint64{1}}, warnings: 2},
		{name: "mode copy", in: env(`{"source_control_endpoint":"tcp://h:1","block_hashes":[1],"mode":"copy"}`),
			want: Hint{Endpoint: "tcp://h:1", BlockHashes: []uint64{1}}},
		{name: "duplicates merged in first-seen order",
			in:   env(`{"source_control_endpoint":"tcp://h:1","block_hashes":[3,1,3,2,1]}`),
			want: Hint{Endpoint: "tcp://h:1", BlockHashes: []uint64{3, 1, 2}}},
		{name: "full u64 range",
			in:   env(`{"source_control_endpoint":"tcp://h:1","block_hashes":[0,9223372036854775808,18446744073709551615]}`),
			want: Hint{Endpoint: "tcp://h:1", BlockHashes: []uint64{0, 1 << 63, 1<<64 - 1}}},
		{name: "unknown payload keys ignored",
			in:   env(`{"source_control_endpoint":"tcp://h:1","block_hashes":[1],"priority":"high"}`),
			want: Hint{Endpoint: "tcp://h:1", BlockHashes: []uint64{1}}},

		{name: "not JSON", in: `{"actions":`, err: ErrMalformed, field: "hint"},
		{name: "trailing data", in: `{} []`, err: ErrMalformed, field: "not JSON"},
		{name: "a list", in: `[1]`, err: ErrMalformed, field: "want an object"},
		{name: "null", in: `null`, err: ErrMalformed, field: "want an object"},
		{name: "actions not a list", in: `{"actions":{"0":{}}}`, err: ErrMalformed, field: "actions"},
		{name: "no actions", in: `{"protocol_version":"0.1","actions":[]}`, err: ErrNoFetchAction, field: "actions"},
		{name: "only unknown actions", in: `{"actions":[{"action_type":"kv.evict"}]}`, err: ErrNoFetchAction, field: "actions"},
		{name: "neither envelope nor flat", in: `{"message_id":"m"}`, err: ErrNoFetchAction, field: "actions"},
		{name: "payload missing", in: `{"actions":[{"action_type":"kv.fetch"}]}`, err: ErrBadPayload, field: "actions[0].payload"},
		{name: "payload a list", in: `{"actions":[{"action_type":"kv.fetch","payload":[]}]}`, err: ErrBadPayload, field: "actions[0].payload"},
		{name: "source missing", in: env(`{"block_hashes":[1]}`), err: ErrBadSource, field: "payload.source_control_endpoint"},
		{name: "source empty", in: env(`{"source_control_endpoint":"","block_hashes":[1]}`), err: ErrBadSource, field: "source_control_endpoint"},
		{name: "source a number", in: env(`{"source_control_endpoint":25000,"block_hashes":[1]}`), err: ErrBadSource, field: "source_control_endpoint"},
		{name: "flat source missing", in: `{"block_hashes":[1]}`, err: ErrBadSource, field: "source_control_endpoint"},
		{name: "hashes missing", in: env(`{"source_control_endpoint":"tcp://h:1"}`), err: ErrBadBlockHashes, field: "payload.block_hashes"},
		{name: "hashes empty", in: env(`{"source_control_endpoint":"tcp://h:1","block_hashes":[]}`), err: ErrBadBlockHashes, field: "block_hashes"},
		{name: "hashes not a list", in: env(`{"source_control_endpoint":"tcp://h:1","block_hashes":11}`), err: ErrBadBlockHashes, field: "block_hashes"},
		{name: "bool hash", in: env(`{"source_control_endpoint":"tcp://h:1","block_hashes":[1,true]}`), err: ErrBadBlockHashes, field: "block_hashes[1]"},
		{name: "float hash", in: env(`{"source_control_endpoint":"tcp://h:1","block_hashes":[1.5]}`), err: ErrBadBlockHashes, field: "got float"},
		{name: "integral float hash", in: env(`{"source_control_endpoint":"tcp://h:1","block_hashes":[2,1.0]}`), err: ErrBadBlockHashes, field: "block_hashes[1]"},
		{name: "exponent hash", in: env(`{"source_control_endpoint":"tcp://h:1","block_hashes":[1e3]}`), err: ErrBadBlockHashes, field: "got float"},
		{name: "negative hash", in: env(`{"source_control_endpoint":"tcp://h:1","block_hashes":[-1]}`), err: ErrBadBlockHashes, field: "got negative"},
		{name: "negative zero", in: env(`{"source_control_endpoint":"tcp://h:1","block_hashes":[-0]}`), err: ErrBadBlockHashes, field: "got negative"},
		{name: "string hash", in: env(`{"source_control_endpoint":"tcp://h:1","block_hashes":["11"]}`), err: ErrBadBlockHashes, field: "got string"},
		{name: "null hash", in: env(`{"source_control_endpoint":"tcp://h:1","block_hashes":[null]}`), err: ErrBadBlockHashes, field: "got null"},
		{name: "hash of 2^64", in: env(`{"source_control_endpoint":"tcp://h:1","block_hashes":[18446744073709551616]}`), err: ErrBadBlockHashes, field: "block_hashes[0]"},
		{name: "mode move", in: env(`{"source_control_endpoint":"tcp://h:1","block_hashes":[1],"mode":"move"}`), err: ErrUnsupportedMode, field: "payload.mode"},
		{name: "mode no_retain", in: env(`{"source_control_endpoint":"tcp://h:1","block_hashes":[1],"mode":"no_retain"}`), err: ErrUnsupportedMode, field: `"no_retain"`},
		{name: "mode null", in: env(`{"source_control_endpoint":"tcp://h:1","block_hashes":[1],"mode":null}`), err: ErrUnsupportedMode, field: "mode"},
		{name: "mode Copy", in: env(`{"source_control_endpoint":"tcp://h:1","block_hashes":[1],"mode":"Copy"}`), err: ErrUnsupportedMode, field: "mode"},
		{name: "flat mode move", in: `{"source_control_endpoint":"tcp://h:1","block_hashes":[1],"mode":"move"}`, err: ErrUnsupportedMode, field: "mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse([]byte(tt.in))
			samePaths(t, []byte(tt.in), p, err)
			if tt.err != nil {
				var fe *FieldError
				if !errors.Is(err, tt.err) || !errors.As(err, &fe) || !strings.Contains(err.Error(), tt.field) {
					t.Fatalf("err = %v, want %v naming %q", err, tt.err, tt.field)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(p.Hint, tt.want) || p.Flat != tt.flat || len(p.Warnings) != tt.warnings {
				t.Fatalf("got %+v, want %+v flat=%v with %d warnings", p, tt.want, tt.flat, tt.warnings)
			}
		})
	}
}

// samePaths checks that Parse, which reads block hashes in place, and
// ParseValue on the fully decoded hint agree.
func samePaths(t *testing.T, data []byte, p Parsed, err error) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil || dec.More() {
		return
	}
	if _, terr := dec.Token(); terr != io.EOF {
		return
	}
	q, qerr := ParseValue(v)
	if fmt.Sprint(err) != fmt.Sprint(qerr) || !reflect.DeepEqual(p, q) {
		t.Fatalf("Parse and ParseValue disagree on %s:\n %+v, %v\n %+v, %v", data, p, err, q, qerr)
	}
}

// ParseValue serves consumers that decoded the hint themselves, e.g. from
// msgpack.
func TestParseValue(t *testing.T) {
	flat := func(hashes ...any) map[string]any {
		return map[string]any{keySourceEndpoint: "tcp://h:1", keyBlockHashes: hashes}
	}
	tests := []struct {
		name string
		in   any
		want []uint64
		err  error
	}{
		{"Go integer types", flat(int(1), int8(2), int16(3), int32(4), int64(5), uint(6), uint8(7), uint16(8), uint32(9), uint64(1<<64-1)),
			[]uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 1<<64 - 1}, nil},
		{"json.Number", flat(json.Number("42")), []uint64{42}, nil},
		{"float64 refused", flat(float64(42)), nil, ErrBadBlockHashes},
		{"negative int64 refused", flat(int64(-5)), nil, ErrBadBlockHashes},
		{"negative int8 refused", flat(int8(-1)), nil, ErrBadBlockHashes},
		{"bool refused", flat(false), nil, ErrBadBlockHashes},
		{"string keyed only", map[any]any{"a": 1}, nil, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParseValue(tt.in)
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if err == nil && !reflect.DeepEqual(p.Hint.BlockHashes, tt.want) {
				t.Fatalf("hashes = %v, want %v", p.Hint.BlockHashes, tt.want)
			}
		})
	}
}

// Whatever we encode, a consumer parses back to the same hint.
func TestEncodeParseRoundTrip(t *testing.T) {
	hints := []Hint{
		{Endpoint: "tcp://10.0.0.7:25000", BlockHashes: []uint64{11, 22}},
		{Endpoint: "tcp://[fd00::1]:23280", BlockHashes: []uint64{1<<64 - 1, 0, 1 << 63}},
		{Endpoint: "x\"\\\n\x00é", BlockHashes: []uint64{5}},
	}
	for _, h := range hints {
		for _, flat := range []bool{false, true} {
			var b []byte
			if flat {
				b = AppendFlat(nil, h)
			} else {
				b = AppendEnvelope(nil, "req\x01", h)
			}
			p, err := Parse(b)
			if err != nil {
				t.Fatalf("%s: %v", b, err)
			}
			if !reflect.DeepEqual(p.Hint, h) || p.Flat != flat || len(p.Warnings) != 0 || !flat && p.MessageID != "req\x01" {
				t.Errorf("%s parsed as %+v", b, p)
			}
		}
	}
}
