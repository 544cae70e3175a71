package workload

import (
	"bytes"
	"flag"
	"os"
	"slices"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/mooncake_small.jsonl from its generator")

const smallTracePath = "testdata/mooncake_small.jsonl"

// The committed trace is exactly what the generator produces, so anyone can
// tell how it was made and regenerate it with -update.
func TestSmallTraceIsGenerated(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteMooncake(&buf, SyntheticMooncake(smallTraceSeed, smallTraceRequests)); err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(smallTracePath, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	file, err := os.ReadFile(smallTracePath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(file, buf.Bytes()) {
		t.Fatalf("%s is not SyntheticMooncake(%d, %d); run go test -run TestSmallTraceIsGenerated -update", smallTracePath, smallTraceSeed, smallTraceRequests)
	}
	if !*update && !bytes.Equal(smallTrace, file) {
		t.Fatal("the embedded trace differs from the file (stale build?)")
	}
}

// The small trace has the sharing it is meant to exercise.
func TestSmallTraceShape(t *testing.T) {
	reqs, err := ReadMooncake(SmallTrace(), MooncakeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != smallTraceRequests {
		t.Fatalf("%d requests, want %d", len(reqs), smallTraceRequests)
	}
	lines := SyntheticMooncake(smallTraceSeed, smallTraceRequests)
	firstBlock := map[uint64]int{} // first hash id → sessions opening with it
	sessions := map[string][]uint64{}
	bursts := 0
	for i, l := range lines {
		if prev, ok := sessions[l.SessionID]; ok && l.SessionID != "" {
			if !slices.Equal(prev, l.HashIDs[:len(prev)]) {
				t.Fatalf("line %d: session %s does not extend its previous turn", i+1, l.SessionID)
			}
		} else {
			firstBlock[l.HashIDs[0]]++
		}
		sessions[l.SessionID] = l.HashIDs
		if i >= 5 && l.Timestamp-lines[i-5].Timestamp <= 40 {
			bursts++
		}
	}
	shared := 0
	for _, n := range firstBlock {
		if n >= 5 {
			shared++
		}
	}
	multi := 0
	for _, r := range reqs {
		if r.Turn >= 2 {
			multi++
		}
	}
	span := reqs[len(reqs)-1].Arrival
	t.Logf("%d sessions, %d prompts shared by ≥5 sessions, %d turns ≥ 3rd, %d burst lines, span %v", len(sessions), shared, multi, bursts, span)
	switch {
	case shared < 2:
		t.Errorf("%d system prompts shared by 5 or more sessions, want ≥ 2", shared)
	case multi < 20:
		t.Errorf("%d third-or-later turns, want ≥ 20", multi)
	case bursts == 0:
		t.Error("no burst (6 lines within 40 ms)")
	}
	// Turns of one session extend each other token for token, not only by
	// hash id: that is what gives the engine its prefix hits.
	last := map[string][]uint32{}
	for _, r := range reqs {
		if prev, ok := last[r.Session]; ok && r.Session != "" {
			if len(r.Prompt) < len(prev) || !slices.Equal(prev, r.Prompt[:len(prev)]) {
				t.Fatalf("%s: prompt does not extend turn %d of %s", r.ID, r.Turn-1, r.Session)
			}
		}
		last[r.Session] = r.Prompt
	}
}

func TestSyntheticMooncakeDeterministic(t *testing.T) {
	a, b := SyntheticMooncake(3, 50), SyntheticMooncake(3, 50)
	if len(a) != 50 || !slices.EqualFunc(a, b, func(x, y MooncakeLine) bool {
		return x.Timestamp == y.Timestamp && x.InputLength == y.InputLength && x.OutputLength == y.OutputLength &&
			slices.Equal(x.HashIDs, y.HashIDs) && x.SessionID == y.SessionID
	}) {
		t.Fatal("two runs with one seed differ")
	}
	if c := SyntheticMooncake(4, 50); slices.EqualFunc(a, c, func(x, y MooncakeLine) bool { return x.InputLength == y.InputLength }) {
		t.Fatal("seeds 3 and 4 give the same trace")
	}
	if SyntheticMooncake(1, 0) != nil {
		t.Fatal("0 requests gave some")
	}
}
