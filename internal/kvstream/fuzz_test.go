package kvstream

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

// pick returns the first n%(len(all)+1) frames.
func pick(n uint8, all ...[]byte) [][]byte {
	return all[:int(n)%(len(all)+1)]
}

func sameFrames(a, b [][]byte) bool {
	return slices.EqualFunc(a, b, func(x, y []byte) bool { return bytes.Equal(x, y) })
}

func FuzzParseMessage(f *testing.F) {
	f.Add(uint8(3), []byte("kv@h:1@m"), []byte{0, 0, 0, 0, 0, 0, 0, 9}, []byte{0x93, 0xcb}, []byte(nil))
	f.Add(uint8(3), []byte(nil), []byte{1}, []byte("x"), []byte(nil))
	f.Add(uint8(4), []byte("kv"), []byte{0, 0, 0, 0, 0, 0, 0, 1}, []byte("p"), []byte("extra"))
	f.Add(uint8(2), []byte("kv"), []byte{0, 0, 0, 0, 0, 0, 0, 1}, []byte(nil), []byte(nil))
	f.Fuzz(func(t *testing.T, n uint8, a, b, c, d []byte) {
		frames := pick(n, a, b, c, d)
		topic, seq, payload, err := ParseMessage(frames)
		valid := len(frames) == 3 && len(b) == 8
		if valid != (err == nil) {
			t.Fatalf("frames %q: err %v, valid %v", frames, err, valid)
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if got := EncodeMessage(string(topic), seq, payload); !sameFrames(got, frames) {
			t.Fatalf("round trip: %q != %q", got, frames)
		}
	})
}

func FuzzParseReplayRequest(f *testing.F) {
	f.Add(uint8(2), []byte(nil), []byte{0, 0, 0, 0, 0, 0, 0, 3}, []byte(nil))
	f.Add(uint8(2), []byte("x"), []byte{0, 0, 0, 0, 0, 0, 0, 3}, []byte(nil))
	f.Add(uint8(1), []byte{0, 0, 0, 0, 0, 0, 0, 3}, []byte(nil), []byte(nil))
	f.Add(uint8(3), []byte(nil), []byte{0, 0, 0, 0, 0, 0, 0, 3}, []byte("extra"))
	f.Fuzz(func(t *testing.T, n uint8, a, b, c []byte) {
		frames := pick(n, a, b, c)
		start, err := ParseReplayRequest(frames)
		valid := len(frames) == 2 && len(a) == 0 && len(b) == 8
		if valid != (err == nil) {
			t.Fatalf("frames %q: err %v, valid %v", frames, err, valid)
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if got := EncodeReplayRequest(start); !sameFrames(got, frames) {
			t.Fatalf("round trip: %q != %q", got, frames)
		}
	})
}

func FuzzParseReplayReply(f *testing.F) {
	f.Add(uint8(3), []byte(nil), []byte{0, 0, 0, 0, 0, 0, 0, 3}, []byte("payload"), []byte(nil))
	f.Add(uint8(3), []byte(nil), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, []byte(nil), []byte(nil))
	f.Add(uint8(4), []byte(nil), []byte("kv"), []byte{0, 0, 0, 0, 0, 0, 0, 3}, []byte("p"))
	f.Add(uint8(3), []byte("id"), []byte{0, 0, 0, 0, 0, 0, 0, 3}, []byte("p"), []byte(nil))
	f.Fuzz(func(t *testing.T, n uint8, a, b, c, d []byte) {
		frames := pick(n, a, b, c, d)
		seq, payload, end, err := ParseReplayReply(frames)
		valid := len(frames) == 3 && len(b) == 8 || len(frames) == 4 && len(a) == 0 && len(c) == 8
		if valid != (err == nil) {
			t.Fatalf("frames %q: err %v, valid %v", frames, err, valid)
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if end != (seq == endSeq) {
			t.Fatalf("seq %x: end %v", seq, end)
		}
		if !end {
			// The last two frames are seq and payload, whatever the
			// framing.
			last := frames[len(frames)-2:]
			if got := EncodeReplayReply(seq, payload); !sameFrames(got[1:], last) {
				t.Fatalf("round trip: %q != %q", got[1:], last)
			}
		}
	})
}

// FuzzTracker feeds the state machine sequence numbers as a network could
// (jumps, repeats, restarts, odd replay answers) and checks its promises:
// per key, delivered seqs rise strictly between Restarts, and once every
// replay is settled each live message has been delivered exactly once.
//
// Each op is two bytes: op (bit 0: key; bits 1-2: kind) and arg.
// Kinds: 0, 1 live with seq last+arg-4 (arg%16, so small steps either way);
// 2 answer the oldest pending replay with arg%8 batches from its From;
// 3 cut the oldest pending replay.
func FuzzTracker(f *testing.F) {
	f.Add([]byte{0, 5, 0, 8, 2, 3, 0, 5, 6, 0})
	f.Add([]byte{0, 5, 1, 5, 0, 12, 1, 20, 0, 5, 4, 2, 6, 0})
	f.Add([]byte{0, 5, 0, 9, 0, 0, 0, 5, 4, 7})
	f.Fuzz(func(t *testing.T, ops []byte) {
		tr := Tracker{MaxHeld: 8}
		keys := []string{"a", "b"}
		last := map[string]uint64{"a": 100, "b": 100}
		var pending []ReplayRequest
		live := map[string]int{}      // live messages fed, by key
		delivered := map[string]int{} // live messages delivered, by key
		prev := map[string]uint64{}
		seen := map[string]bool{}
		check := func(items []Item) {
			for _, it := range items {
				switch v := it.(type) {
				case Restart:
					seen[v.Key] = false
				case Message:
					if seen[v.Key] && v.Seq <= prev[v.Key] {
						t.Fatalf("key %s: seq %d delivered after %d without a Restart", v.Key, v.Seq, prev[v.Key])
					}
					prev[v.Key], seen[v.Key] = v.Seq, true
					if !v.Replayed {
						delivered[v.Key]++
					}
				}
			}
		}
		ask := func(req *ReplayRequest) {
			if req != nil {
				pending = append(pending, *req)
			}
		}
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i], ops[i+1]
			key := keys[op&1]
			switch (op >> 1) & 3 {
			case 0, 1:
				seq := last[key] + uint64(arg%16) - 4
				last[key] = seq
				live[key]++
				items, req := tr.Live(nil, key, Message{Seq: seq}, true)
				check(items)
				ask(req)
			case 2, 3:
				if len(pending) == 0 {
					continue
				}
				req := pending[0]
				pending = pending[1:]
				res := ReplayResult{ID: req.ID, Key: req.Key, Complete: (op>>1)&3 == 2}
				for s := range uint64(arg % 8) {
					res.Messages = append(res.Messages, Message{Seq: req.From + s})
				}
				items, next := tr.Replayed(nil, res, true)
				check(items)
				ask(next)
			}
		}
		for len(pending) > 0 {
			req := pending[0]
			pending = pending[1:]
			items, next := tr.Replayed(nil, ReplayResult{ID: req.ID, Key: req.Key}, true)
			check(items)
			ask(next)
		}
		for _, k := range keys {
			if tr.Replaying(k) {
				t.Fatalf("key %s still replaying after every replay settled", k)
			}
			if live[k] != delivered[k] {
				t.Fatalf("key %s: %d live messages fed, %d delivered", k, live[k], delivered[k])
			}
		}
	})
}
