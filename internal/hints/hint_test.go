package hints

import (
	"bytes"
	"encoding/json"
	"kvrouter/internal/golden"
	"path/filepath"
	"testing"
)

// specEnvelope is the example of docs/wire.md §6.3 as printed there, with its spacing.
const specEnvelope = `{"protocol_version": "0.1", "message_id": "<request id>",
 "actions": [{"action_id": "a1", "action_type": "kv.fetch", "action_version": "1.0",
              "payload": {"source_control_endpoint": "tcp://10.0.0.7:25000",
                          "block_hashes": [11, 22]}}]}`

func TestEncodeGolden(t *testing.T) {
	spec := Hint{Endpoint: "tcp://10.0.0.7:25000", BlockHashes: []uint64{11, 22}}
	wide := Hint{Endpoint: "tcp://[fd00::1]:23280", BlockHashes: []uint64{0, 1<<63 - 1, 1 << 63, 1<<64 - 1}}
	odd := Hint{Endpoint: "tcp://h:1/\"quoted\"\\\n\x01\u2028é", BlockHashes: []uint64{5}}
	tests := []struct {
		file string
		got  []byte
	}{
		{"envelope_spec.json", AppendEnvelope(nil, "<request id>", spec)},
		{"envelope_u64.json", AppendEnvelope(nil, "req-7", wide)},
		{"envelope_escapes.json", AppendEnvelope(nil, "id\t\"x\"", odd)},
		{"flat_spec.json", AppendFlat(nil, spec)},
		{"flat_u64.json", AppendFlat(nil, wide)},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			if !json.Valid(tt.got) {
				t.Fatalf("invalid JSON: %s", tt.got)
			}
			golden.Check(t, filepath.Join("testdata", "golden", tt.file), tt.got)
		})
	}
}

// The envelope is the example of docs/wire.md §6.3 byte for byte, once its
// spacing is taken out.
func TestEnvelopeMatchesWireDoc(t *testing.T) {
	var want bytes.Buffer
	if err := json.Compact(&want, []byte(specEnvelope)); err != nil {
		t.Fatal(err)
	}
	got := AppendEnvelope(nil, "<request id>", Hint{Endpoint: "tcp://10.0.0.7:25000", BlockHashes: []uint64{11, 22}})
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("got  %s\nwant %s", got, want.Bytes())
	}
}

// Strings we write read back as the same string through a standard decoder.
func TestAppendStringRoundTrip(t *testing.T) {
	for _, s := range []string{"", "plain", `q"b\`, "\x00\x1f\x7f", "<>&", "é\u2028", "bad\xffutf8"} {
		out := appendString(nil, s)
		var back string
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("%q encoded as invalid %s: %v", s, out, err)
		}
		want := s
		if s == "bad\xffutf8" {
			want = "bad\uFFFDutf8"
		}
		if back != want {
			t.Errorf("%q → %s → %q", s, out, back)
		}
	}
}
