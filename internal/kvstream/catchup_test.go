package kvstream

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The catch-up at start replays the history before any live message, holds
// what arrives live meanwhile, and drops the live copies of what it
// delivered.
func TestTrackerStart(t *testing.T) {
	tests := []struct {
		name    string
		catchUp bool
		steps   [][2]string // op, the items and asks it gives, space-separated with "|"
	}{
		{"off without catch-up", false, [][2]string{
			{"start a", ""},
			{"live a 3", "msg a 3"},
		}},
		{"an idle publisher's history", true, [][2]string{
			{"start a", "ask a 0"},
			{"start a", ""},
			{"replay 1 0 1 2 end", "msg a 0 r|msg a 1 r|msg a 2 r"},
			{"live a 3", "msg a 3"},
		}},
		{"live copies of the history are dropped until a newer one", true, [][2]string{
			{"start a", "ask a 0"},
			{"replay 1 0 1 2 end", "msg a 0 r|msg a 1 r|msg a 2 r"},
			{"live a 1", ""},
			{"live a 2", ""},
			{"live a 3", "msg a 3"},
			{"live a 0", "restart a 3->0|msg a 0"},
		}},
		{"after a reconnect the publisher starts over", true, [][2]string{
			{"start a", "ask a 0"},
			{"replay 1 0 1 2 end", "msg a 0 r|msg a 1 r|msg a 2 r"},
			{"reconnect a", "ask a 0"},
			{"replay 2 end", ""},
			{"live a 0", "msg a 0"},
		}},
		{"live messages during the replay are held and anchor it", true, [][2]string{
			{"start a", "ask a 0"},
			{"live a 4", ""},
			{"live a 5", ""},
			{"replay 1 0 1 2 3 4 5 6 end", "msg a 0 r|msg a 1 r|msg a 2 r|msg a 3 r|msg a 4|msg a 5"},
			{"live a 6", "msg a 6"},
		}},
		{"a gap between held messages is filled by the same answer", true, [][2]string{
			{"start a", "ask a 0"},
			{"live a 2", ""},
			{"live a 4", "gap a 3-3"},
			{"replay 1 0 1 2 3 4 end", "msg a 0 r|msg a 1 r|msg a 2|msg a 3 r|healed a 3-3|msg a 4"},
		}},
		{"the buffer's head is gone", true, [][2]string{
			{"start a", "ask a 0"},
			{"replay 1 5 6 end", "lost a 0-4|msg a 5 r|msg a 6 r"},
			{"live a 7", "msg a 7"},
		}},
		{"nothing buffered: the first message catches up again", true, [][2]string{
			{"start a", "ask a 0"},
			{"replay 1 end", ""},
			{"live a 0", "msg a 0"},
			{"live a 1", "msg a 1"},
		}},
		{"nothing buffered, then batches the subscription missed", true, [][2]string{
			{"start a", "ask a 0"},
			{"replay 1 end", ""},
			{"live a 2", "gap a 0-1|ask a 0"},
			{"replay 2 0 1 2 end", "msg a 0 r|msg a 1 r|healed a 0-1|msg a 2"},
		}},
		{"a failed catch-up leaves the key to its first message", true, [][2]string{
			{"start a", "ask a 0"},
			{"replay 1 cut", ""},
			{"live a 3", "gap a 0-2|ask a 0"},
		}},
		{"without catch-up a reconnect asks for nothing", false, [][2]string{
			{"live a 3", "msg a 3"},
			{"reconnect a", ""},
			{"live a 5", "gap a 4-4|ask a 4"},
		}},
		{"a reconnect before anything was delivered catches up from 0", true, [][2]string{
			{"start a", "ask a 0"},
			{"replay 1 end", ""},
			{"reconnect a", "ask a 0"},
			{"replay 2 0 1 end", "msg a 0 r|msg a 1 r"},
			{"live a 1", ""},
			{"live a 2", "msg a 2"},
		}},
		{"a live message past the history opens a gap", true, [][2]string{
			{"start a", "ask a 0"},
			{"replay 1 0 1 end", "msg a 0 r|msg a 1 r"},
			{"live a 4", "gap a 2-3|ask a 2"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := Tracker{CatchUp: tc.catchUp}
			runCatchUpSteps(t, &tr, tc.steps)
		})
	}
}

// At a reconnect the batches published while the connection was down are
// asked for at once: an idle publisher sends no live message whose seq
// would reveal them.
func TestTrackerReconnect(t *testing.T) {
	// Each case starts from a key that delivered 0..3, the last one live.
	// A reconnect starts the key over with a catch-up from seq 0.
	setup := [][2]string{
		{"start a", "ask a 0"},
		{"replay 1 0 1 2 end", "msg a 0 r|msg a 1 r|msg a 2 r"},
		{"live a 3", "msg a 3"},
	}
	tests := []struct {
		name  string
		steps [][2]string // as in TestTrackerStart, after setup's
	}{
		{"the whole history again, then live copies of it", [][2]string{
			{"reconnect a", "ask a 0"},
			{"replay 2 0 1 2 3 4 5 end", "msg a 0 r|msg a 1 r|msg a 2 r|msg a 3 r|msg a 4 r|msg a 5 r"},
			{"live a 5", ""},
			{"live a 6", "msg a 6"},
		}},
		{"an idle publisher that missed nothing", [][2]string{
			{"reconnect a", "ask a 0"},
			{"replay 2 0 1 2 3 end", "msg a 0 r|msg a 1 r|msg a 2 r|msg a 3 r"},
			{"live a 4", "msg a 4"},
		}},
		{"a publisher that restarted with fewer batches", [][2]string{
			{"reconnect a", "ask a 0"},
			{"replay 2 0 1 end", "msg a 0 r|msg a 1 r"},
			{"live a 2", "msg a 2"},
		}},
		{"live messages meanwhile follow the history", [][2]string{
			{"reconnect a", "ask a 0"},
			{"live a 7", ""},
			{"live a 8", ""},
			{"replay 2 0 1 2 3 4 5 6 7 8 end", "msg a 0 r|msg a 1 r|msg a 2 r|msg a 3 r|msg a 4 r|msg a 5 r|msg a 6 r|msg a 7|msg a 8"},
			{"live a 9", "msg a 9"},
		}},
		{"the buffer lost the oldest batches", [][2]string{
			{"reconnect a", "ask a 0"},
			{"replay 2 7 8 end", "lost a 0-6|msg a 7 r|msg a 8 r"},
			{"live a 9", "msg a 9"},
		}},
		{"a failed catch-up leaves the key to its first message", [][2]string{
			{"reconnect a", "ask a 0"},
			{"replay 2 cut", ""},
			{"live a 6", "gap a 0-5|ask a 0"},
		}},
		{"a reconnect during a gap's replay abandons it and what it holds", [][2]string{
			{"live a 5", "gap a 4-4|ask a 4"},
			{"reconnect a", "ask a 0"},
			{"replay 2 4 5 end", ""},
			{"replay 3 0 1 2 3 4 5 6 end", "msg a 0 r|msg a 1 r|msg a 2 r|msg a 3 r|msg a 4 r|msg a 5 r|msg a 6 r"},
			{"live a 6", ""},
			{"live a 7", "msg a 7"},
		}},
		{"without a replay endpoint nothing is asked", [][2]string{
			{"reconnect-noreplay a", ""},
			{"live a 2", "restart a 3->2|msg a 2"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := Tracker{CatchUp: true}
			runCatchUpSteps(t, &tr, append(slices.Clone(setup), tc.steps...))
		})
	}
}

// runCatchUpSteps runs the steps of a catch-up table on tr: "start KEY",
// "reconnect KEY", "live KEY SEQ", or "replay N SEQ... end|cut" answering
// the Nth ReplayRequest the steps issued; each gives the items and asks
// expected, space-separated words joined with "|".
func runCatchUpSteps(t *testing.T, tr *Tracker, steps [][2]string) {
	t.Helper()
	var asked []ReplayRequest
	for i, st := range steps {
		f := strings.Fields(st[0])
		var items []Item
		var req *ReplayRequest
		switch f[0] {
		case "start":
			req = tr.Start(f[1])
		case "reconnect":
			req = tr.Reconnect(f[1], true)
		case "reconnect-noreplay":
			req = tr.Reconnect(f[1], false)
		case "live":
			seq, _ := strconv.ParseUint(f[2], 10, 64)
			items, req = tr.Live(nil, f[1], Message{Topic: "t", Seq: seq}, true)
		case "replay":
			n, _ := strconv.Atoi(f[1])
			res := ReplayResult{ID: asked[n-1].ID, Key: asked[n-1].Key, Complete: f[len(f)-1] == "end"}
			for _, s := range f[2 : len(f)-1] {
				seq, _ := strconv.ParseUint(s, 10, 64)
				res.Messages = append(res.Messages, Message{Seq: seq})
			}
			items, req = tr.Replayed(nil, res, true)
		}
		var got []string
		for _, it := range items {
			got = append(got, itemString(it))
		}
		if req != nil {
			got = append(got, fmt.Sprintf("ask %s %d", req.Key, req.From))
			asked = append(asked, *req)
		}
		var want []string
		if st[1] != "" {
			want = strings.Split(st[1], "|")
		}
		if !slices.Equal(got, want) {
			t.Fatalf("step %d %q:\n got %q\nwant %q", i, st[0], got, want)
		}
	}
}
