package kvevents

import (
	"bytes"
	"errors"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestParseFrame(t *testing.T) {
	tests := []struct {
		line string
		want Frame
		err  bool
	}{
		{line: "kv@h:1@m 0000000000000001 93c0", want: Frame{Topic: "kv@h:1@m", Seq: 1, Payload: []byte{0x93, 0xc0}}},
		{line: " ffffffffffffffff ", want: Frame{Seq: 1<<64 - 1, Payload: []byte{}}},
		{line: "a b 000000000000000A 00", want: Frame{Topic: "a b", Seq: 10, Payload: []byte{0}}},
		{line: "topic 1 00", err: true},
		{line: "topic 000000000000000g 00", err: true},
		{line: "topic 0000000000000001 0", err: true},
		{line: "topic 0000000000000001 zz", err: true},
		{line: "0000000000000001", err: true},
		{line: "0000000000000001 00", err: true},
	}
	for _, tc := range tests {
		got, err := ParseFrame(tc.line)
		if tc.err {
			if !errors.Is(err, ErrBadFrame) {
				t.Errorf("ParseFrame(%q) error %v, want ErrBadFrame", tc.line, err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseFrame(%q) = %+v, %v; want %+v", tc.line, got, err, tc.want)
		}
	}
}

func TestReadFrames(t *testing.T) {
	in := "# a capture\n\nt 0000000000000002 c0\r\n t2 0000000000000003 \n"
	got, err := ReadFrames(strings.NewReader(in))
	want := []Frame{{Topic: "t", Seq: 2, Payload: []byte{0xc0}}, {Topic: " t2", Seq: 3, Payload: []byte{}}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ReadFrames = %+v, %v; want %+v", got, err, want)
	}
	var out []byte
	for _, f := range want {
		out = AppendFrame(out, f)
	}
	if back, err := ReadFrames(bytes.NewReader(out)); err != nil || !reflect.DeepEqual(back, want) {
		t.Errorf("AppendFrame does not read back: %+v, %v", back, err)
	}

	fr := NewFrameReader(strings.NewReader("t 0000000000000001 00\nbroken\n"))
	if _, err := fr.Next(); err != nil {
		t.Fatal(err)
	}
	if _, err := fr.Next(); !errors.Is(err, ErrBadFrame) || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("bad line: error %v, want ErrBadFrame naming line 2", err)
	}
	if _, err := NewFrameReader(strings.NewReader("")).Next(); err != io.EOF {
		t.Errorf("empty input: %v, want io.EOF", err)
	}
}

// The captured llm-d simulator streams decode cleanly and hold what the
// README says they hold.
func TestCaptures(t *testing.T) {
	for _, name := range []string{"sim-map", "sim-array"} {
		t.Run(name, func(t *testing.T) {
			f, err := os.Open("testdata/" + name + ".frames")
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			frames, err := ReadFrames(f)
			if err != nil {
				t.Fatal(err)
			}
			if len(frames) == 0 {
				t.Fatal("no frames")
			}
			var d Decoder
			kinds := map[Kind]int{}
			var bigToken bool
			for i, fr := range frames {
				if fr.Seq != uint64(i+1) {
					t.Errorf("frame %d: seq %d, want %d", i, fr.Seq, i+1)
				}
				if !strings.HasPrefix(fr.Topic, "kv@127.0.0.1:") {
					t.Errorf("frame %d: topic %q", i, fr.Topic)
				}
				b, err := d.Decode(fr.Payload)
				if err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				for _, ev := range b.Events {
					kinds[ev.Kind]++
					if ev.Kind == KindStored && ev.BlockSize != 16 {
						t.Errorf("frame %d: block size %d, want 16", i, ev.BlockSize)
					}
					if ev.Tier != TierDevice || ev.Ownership != OwnedByWorker {
						t.Errorf("frame %d: tier %v ownership %v", i, ev.Tier, ev.Ownership)
					}
					for _, tok := range ev.TokenIDs {
						bigToken = bigToken || tok > 1<<31
					}
				}
			}
			if kinds[KindStored] == 0 || kinds[KindRemoved] == 0 {
				t.Errorf("events by kind %v, want stores and removes", kinds)
			}
			if !bigToken {
				t.Error("no token id above 2^31: the u32 range is not exercised")
			}
			st := d.Stats()
			if st.Rejected+st.UnknownTags+st.UnknownKeys+st.DroppedMedium+st.DroppedOwnership+st.Placeholders != 0 {
				t.Errorf("Stats = %+v, want nothing rejected, skipped or dropped", st)
			}
		})
	}
}
