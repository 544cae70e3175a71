package kvstream

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// itemString renders an item compactly for the tracker tables.
func itemString(it Item) string {
	switch v := it.(type) {
	case Message:
		s := fmt.Sprintf("msg %s %d", v.Key, v.Seq)
		if v.Replayed {
			s += " r"
		}
		return s
	case Gap:
		if v.Healed {
			return fmt.Sprintf("healed %s %d-%d", v.Key, v.From, v.To)
		}
		return fmt.Sprintf("gap %s %d-%d", v.Key, v.From, v.To)
	case Unrecoverable:
		return fmt.Sprintf("lost %s %d-%d", v.Key, v.From, v.To)
	case Restart:
		return fmt.Sprintf("restart %s %d->%d", v.Key, v.OldSeq, v.NewSeq)
	case Reconnected:
		return "reconnected " + v.Endpoint
	}
	return fmt.Sprintf("unknown %T", it)
}

type trackerStep struct {
	// "live KEY SEQ", or "replay N SEQ... end|cut" answering the Nth
	// ReplayRequest issued (1-based); end means the end marker arrived.
	op   string
	want []string
}

func TestTracker(t *testing.T) {
	tests := []struct {
		name     string
		noReplay bool
		maxHeld  int
		catchUp  bool
		steps    []trackerStep
	}{
		{name: "first seq need not be zero", steps: []trackerStep{
			{"live a 7", []string{"msg a 7"}},
			{"live a 8", []string{"msg a 8"}},
		}},
		{name: "catch-up replays what came before the first message", catchUp: true, steps: []trackerStep{
			{"live a 3", []string{"gap a 0-2", "ask a 0"}},
			{"live a 4", nil},
			{"replay 1 0 1 2 3 4 end", []string{"msg a 0 r", "msg a 1 r", "msg a 2 r", "healed a 0-2", "msg a 3", "msg a 4"}},
			{"live a 5", []string{"msg a 5"}},
		}},
		{name: "catch-up past the buffer's start", catchUp: true, steps: []trackerStep{
			{"live a 9", []string{"gap a 0-8", "ask a 0"}},
			{"replay 1 6 7 8 9 end", []string{"lost a 0-5", "msg a 6 r", "msg a 7 r", "msg a 8 r", "msg a 9"}},
			{"live a 10", []string{"msg a 10"}},
		}},
		{name: "catch-up from seq 0 needs nothing", catchUp: true, steps: []trackerStep{
			{"live a 0", []string{"msg a 0"}},
			{"live a 1", []string{"msg a 1"}},
		}},
		{name: "catch-up needs replay", catchUp: true, noReplay: true, steps: []trackerStep{
			{"live a 4", []string{"msg a 4"}},
		}},
		{name: "restart during catch-up", catchUp: true, steps: []trackerStep{
			{"live a 3", []string{"gap a 0-2", "ask a 0"}},
			{"live a 0", []string{"lost a 0-2", "msg a 3", "restart a 3->0", "msg a 0"}},
		}},
		{name: "keys are independent", steps: []trackerStep{
			{"live a 1", []string{"msg a 1"}},
			{"live b 100", []string{"msg b 100"}},
			{"live a 2", []string{"msg a 2"}},
			{"live b 101", []string{"msg b 101"}},
		}},
		{name: "gap without replay is lost at once", noReplay: true, steps: []trackerStep{
			{"live a 1", []string{"msg a 1"}},
			{"live a 4", []string{"gap a 2-3", "lost a 2-3", "msg a 4"}},
			{"live a 5", []string{"msg a 5"}},
		}},
		{name: "seq back to zero is a restart", steps: []trackerStep{
			{"live a 5", []string{"msg a 5"}},
			{"live a 0", []string{"restart a 5->0", "msg a 0"}},
			{"live a 1", []string{"msg a 1"}},
		}},
		{name: "equal seq is a restart", steps: []trackerStep{
			{"live a 3", []string{"msg a 3"}},
			{"live a 3", []string{"restart a 3->3", "msg a 3"}},
		}},
		{name: "gap healed by replay, live held meanwhile", steps: []trackerStep{
			{"live a 1", []string{"msg a 1"}},
			{"live a 4", []string{"gap a 2-3", "ask a 2"}},
			{"live a 5", nil},
			// 6 is past the highest live seq: it will come live.
			{"replay 1 2 3 4 5 6 end", []string{"msg a 2 r", "msg a 3 r", "healed a 2-3", "msg a 4", "msg a 5"}},
			{"live a 6", []string{"msg a 6"}},
		}},
		{name: "replay answer unordered with duplicates and old seqs", steps: []trackerStep{
			{"live a 5", []string{"msg a 5"}},
			{"live a 8", []string{"gap a 6-7", "ask a 6"}},
			{"replay 1 7 4 6 6 5 8 7 end", []string{"msg a 6 r", "msg a 7 r", "healed a 6-7", "msg a 8"}},
		}},
		{name: "buffer no longer reaches back", steps: []trackerStep{
			{"live a 1", []string{"msg a 1"}},
			{"live a 10", []string{"gap a 2-9", "ask a 2"}},
			{"replay 1 6 7 8 9 10 end", []string{"lost a 2-5", "msg a 6 r", "msg a 7 r", "msg a 8 r", "msg a 9 r", "msg a 10"}},
		}},
		{name: "empty complete answer loses the gap", steps: []trackerStep{
			{"live a 1", []string{"msg a 1"}},
			{"live a 4", []string{"gap a 2-3", "ask a 2"}},
			{"replay 1 end", []string{"lost a 2-3", "msg a 4"}},
		}},
		{name: "cut replay delivers what came", steps: []trackerStep{
			{"live a 1", []string{"msg a 1"}},
			{"live a 5", []string{"gap a 2-4", "ask a 2"}},
			{"replay 1 2 cut", []string{"msg a 2 r", "lost a 3-4", "msg a 5"}},
		}},
		{name: "hole in the middle of a cut replay", steps: []trackerStep{
			{"live a 1", []string{"msg a 1"}},
			{"live a 6", []string{"gap a 2-5", "ask a 2"}},
			{"replay 1 2 4 5 cut", []string{"msg a 2 r", "lost a 3-3", "msg a 4 r", "msg a 5 r", "msg a 6"}},
		}},
		{name: "second gap during replay filled by the same answer", steps: []trackerStep{
			{"live a 1", []string{"msg a 1"}},
			{"live a 3", []string{"gap a 2-2", "ask a 2"}},
			{"live a 4", nil},
			{"live a 6", []string{"gap a 5-5"}},
			{"replay 1 2 3 4 5 6 end", []string{"msg a 2 r", "healed a 2-2", "msg a 3", "msg a 4", "msg a 5 r", "healed a 5-5", "msg a 6"}},
		}},
		{name: "second gap beyond the answer is asked again", steps: []trackerStep{
			{"live a 1", []string{"msg a 1"}},
			{"live a 3", []string{"gap a 2-2", "ask a 2"}},
			{"live a 4", nil},
			{"live a 6", []string{"gap a 5-5"}},
			{"replay 1 2 3 4 end", []string{"msg a 2 r", "healed a 2-2", "msg a 3", "msg a 4", "ask a 5"}},
			{"live a 7", nil},
			{"replay 2 5 6 7 8 end", []string{"msg a 5 r", "healed a 5-5", "msg a 6", "msg a 7"}},
		}},
		{name: "partly filled gap keeps its range when asked again", steps: []trackerStep{
			{"live a 1", []string{"msg a 1"}},
			{"live a 6", []string{"gap a 2-5", "ask a 2"}},
			{"replay 1 2 3 end", []string{"msg a 2 r", "msg a 3 r", "ask a 4"}},
			{"replay 2 4 5 6 end", []string{"msg a 4 r", "msg a 5 r", "healed a 2-5", "msg a 6"}},
		}},
		{name: "asking again stops after the round limit", steps: []trackerStep{
			{"live a 1", []string{"msg a 1"}},
			{"live a 3", []string{"gap a 2-2", "ask a 2"}},
			{"live a 5", []string{"gap a 4-4"}},
			{"replay 1 2 3 end", []string{"msg a 2 r", "healed a 2-2", "msg a 3", "ask a 4"}},
			{"replay 2 2 3 end", []string{"ask a 4"}},
			{"replay 3 3 end", []string{"lost a 4-4", "msg a 5"}},
		}},
		{name: "no second round without replay", steps: []trackerStep{
			{"live a 1", []string{"msg a 1"}},
			{"live a 3", []string{"gap a 2-2", "ask a 2"}},
			{"live a 5", []string{"gap a 4-4"}},
			{"noreplay 1 2 3 end", []string{"msg a 2 r", "healed a 2-2", "msg a 3", "lost a 4-4", "msg a 5"}},
		}},
		{name: "restart during replay abandons it", steps: []trackerStep{
			{"live a 5", []string{"msg a 5"}},
			{"live a 8", []string{"gap a 6-7", "ask a 6"}},
			{"live a 9", nil},
			{"live a 0", []string{"lost a 6-7", "msg a 8", "msg a 9", "restart a 9->0", "msg a 0"}},
			{"replay 1 6 7 8 9 end", nil},
			{"live a 1", []string{"msg a 1"}},
		}},
		{name: "stale answer after a newer gap is ignored", steps: []trackerStep{
			{"live a 1", []string{"msg a 1"}},
			{"live a 3", []string{"gap a 2-2", "ask a 2"}},
			{"replay 1 2 3 end", []string{"msg a 2 r", "healed a 2-2", "msg a 3"}},
			{"live a 5", []string{"gap a 4-4", "ask a 4"}},
			{"replay 1 2 3 4 5 end", nil},
			{"replay 2 4 5 end", []string{"msg a 4 r", "healed a 4-4", "msg a 5"}},
		}},
		{name: "held overflow abandons the replay", maxHeld: 2, steps: []trackerStep{
			{"live a 1", []string{"msg a 1"}},
			{"live a 3", []string{"gap a 2-2", "ask a 2"}},
			{"live a 4", nil},
			{"live a 5", []string{"lost a 2-2", "msg a 3", "msg a 4", "msg a 5"}},
			{"replay 1 2 3 end", nil},
			{"live a 6", []string{"msg a 6"}},
		}},
		{name: "replay of one key leaves others flowing", steps: []trackerStep{
			{"live a 1", []string{"msg a 1"}},
			{"live b 1", []string{"msg b 1"}},
			{"live a 3", []string{"gap a 2-2", "ask a 2"}},
			{"live b 2", []string{"msg b 2"}},
			{"replay 1 2 end", []string{"msg a 2 r", "healed a 2-2", "msg a 3"}},
		}},
		{name: "top of the seq range", steps: []trackerStep{
			{"live a 18446744073709551613", []string{"msg a 18446744073709551613"}},
			{"live a 18446744073709551615", []string{"gap a 18446744073709551614-18446744073709551614", "ask a 18446744073709551614"}},
			{"replay 1 18446744073709551614 cut", []string{"msg a 18446744073709551614 r", "healed a 18446744073709551614-18446744073709551614", "msg a 18446744073709551615"}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := Tracker{MaxHeld: tc.maxHeld, CatchUp: tc.catchUp}
			var asked []ReplayRequest
			for i, st := range tc.steps {
				f := strings.Fields(st.op)
				var items []Item
				var req *ReplayRequest
				switch f[0] {
				case "live":
					seq, err := strconv.ParseUint(f[2], 10, 64)
					if err != nil {
						t.Fatal(err)
					}
					items, req = tr.Live(nil, f[1], Message{Topic: "t-" + f[1], Seq: seq, Payload: []byte(f[2])}, !tc.noReplay)
				case "replay", "noreplay":
					n, err := strconv.Atoi(f[1])
					if err != nil || n < 1 || n > len(asked) {
						t.Fatalf("step %d: no replay request #%s", i, f[1])
					}
					res := ReplayResult{ID: asked[n-1].ID, Key: asked[n-1].Key, Complete: f[len(f)-1] == "end"}
					for _, s := range f[2 : len(f)-1] {
						seq, err := strconv.ParseUint(s, 10, 64)
						if err != nil {
							t.Fatal(err)
						}
						res.Messages = append(res.Messages, Message{Seq: seq, Payload: []byte(s)})
					}
					items, req = tr.Replayed(nil, res, f[0] == "replay" && !tc.noReplay)
				default:
					t.Fatalf("step %d: unknown op %q", i, st.op)
				}
				var got []string
				for _, it := range items {
					got = append(got, itemString(it))
					if m, ok := it.(Message); ok {
						if string(m.Payload) != strconv.FormatUint(m.Seq, 10) {
							t.Errorf("step %d: seq %d carries payload %q", i, m.Seq, m.Payload)
						}
						if m.Topic != "t-"+m.Key {
							t.Errorf("step %d: seq %d has topic %q, want %q", i, m.Seq, m.Topic, "t-"+m.Key)
						}
					}
				}
				if req != nil {
					got = append(got, fmt.Sprintf("ask %s %d", req.Key, req.From))
					asked = append(asked, *req)
				}
				if !slices.Equal(got, st.want) {
					t.Fatalf("step %d %q:\n got %q\nwant %q", i, st.op, got, st.want)
				}
			}
		})
	}
}

func TestTrackerLastAndReplaying(t *testing.T) {
	var tr Tracker
	if _, ok := tr.Last("a"); ok {
		t.Fatal("Last of an unseen key reports ok")
	}
	tr.Live(nil, "a", Message{Seq: 4}, true)
	if last, ok := tr.Last("a"); !ok || last != 4 {
		t.Fatalf("Last = %d, %v; want 4, true", last, ok)
	}
	_, req := tr.Live(nil, "a", Message{Seq: 6}, true)
	if req == nil || !tr.Replaying("a") {
		t.Fatalf("gap did not start a replay: req %v, replaying %v", req, tr.Replaying("a"))
	}
	tr.Replayed(nil, ReplayResult{ID: req.ID, Key: "a", Messages: []Message{{Seq: 5}}, Complete: true}, true)
	if last, _ := tr.Last("a"); last != 6 || tr.Replaying("a") {
		t.Fatalf("after replay: last %d replaying %v; want 6 false", last, tr.Replaying("a"))
	}
}

// TestTrackerForget: a forgotten key starts over at its next message; a
// key waiting for a replay outcome is not forgotten.
func TestTrackerForget(t *testing.T) {
	var tr Tracker
	tr.Live(nil, "a", Message{Seq: 5}, false)
	if last, ok := tr.Forget("a"); !ok || last != 5 {
		t.Fatalf("Forget(a) = %d, %v; want 5, true", last, ok)
	}
	if _, ok := tr.Last("a"); ok {
		t.Fatal("a still tracked")
	}
	// A lower seq after forgetting is a first message, not a restart.
	items, _ := tr.Live(nil, "a", Message{Seq: 2}, false)
	if len(items) != 1 || itemString(items[0]) != "msg a 2" {
		t.Fatalf("after Forget: %v", items)
	}
	tr.Live(nil, "b", Message{Seq: 1}, true)
	if _, req := tr.Live(nil, "b", Message{Seq: 3}, true); req == nil {
		t.Fatal("no replay asked for b's gap")
	}
	if _, ok := tr.Forget("b"); ok || !tr.Replaying("b") {
		t.Fatal("a replaying key was forgotten")
	}
	if _, ok := tr.Forget("c"); ok {
		t.Fatal("an unknown key was forgotten")
	}
}
