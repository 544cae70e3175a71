package workload

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

// FuzzReadMooncake: traces are outside input. The reader never panics,
// rejects with an ErrTrace naming a line, and what it accepts is well
// formed: sorted arrivals from zero, prompts of in-vocabulary tokens, turns
// numbered in order, and each line survives a write and a re-read.
func FuzzReadMooncake(f *testing.F) {
	// The committed corpus is under testdata/fuzz/FuzzReadMooncake; these
	// add the embedded trace's opening lines.
	f.Add(smallTrace[:bytes.IndexByte(smallTrace, '\n')+1])
	f.Fuzz(func(t *testing.T, data []byte) {
		opts := MooncakeOptions{BlockTokens: 4, Vocab: Vocab{Lo: 10, Hi: 20}}
		reqs, err := ReadMooncake(bytes.NewReader(data), opts)
		if err != nil {
			var le *LineError
			if !errors.As(err, &le) || !errors.Is(err, ErrTrace) || le.Line < 1 {
				t.Fatalf("rejected without a line: %v", err)
			}
			return
		}
		if len(reqs) > 0 && reqs[0].Arrival != 0 {
			t.Fatalf("first arrival %v", reqs[0].Arrival)
		}
		turns := map[string]int{}
		for i, r := range reqs {
			if i > 0 && r.Arrival < reqs[i-1].Arrival {
				t.Fatalf("%s due before %s", r.ID, reqs[i-1].ID)
			}
			if len(r.Prompt) == 0 || r.MaxTokens < 1 {
				t.Fatalf("%s: %d prompt tokens, max_tokens %d", r.ID, len(r.Prompt), r.MaxTokens)
			}
			if slices.ContainsFunc(r.Prompt, func(tok uint32) bool { return tok < 10 || tok >= 20 }) {
				t.Fatalf("%s: token outside the vocabulary", r.ID)
			}
			if r.Session != "" {
				if r.Turn != turns[r.Session] {
					t.Fatalf("%s: turn %d, want %d", r.ID, r.Turn, turns[r.Session])
				}
				turns[r.Session]++
			}
		}
		for text := range bytes.Lines(data) {
			if len(bytes.TrimSpace(text)) == 0 {
				continue
			}
			l, err := parseMooncakeLine(bytes.TrimPrefix(text, []byte("\xef\xbb\xbf")), opts.BlockTokens)
			if err != nil {
				t.Fatalf("accepted trace, rejected line %q: %v", text, err)
			}
			var buf bytes.Buffer
			if err := WriteMooncake(&buf, []MooncakeLine{l}); err != nil {
				t.Fatal(err)
			}
			again, err := parseMooncakeLine(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), opts.BlockTokens)
			if err != nil {
				t.Fatalf("%q written as %q: %v", text, buf.Bytes(), err)
			}
			if again.Timestamp != l.Timestamp || again.InputLength != l.InputLength || again.OutputLength != l.OutputLength ||
				!slices.Equal(again.HashIDs, l.HashIDs) || again.SessionID != l.SessionID {
				t.Fatalf("%q → %+v → %q → %+v", text, l, buf.Bytes(), again)
			}
		}
	})
}
