// This file holds the synthetic Mooncake traces: their generator, writer and the embedded one.

package workload

import (
	"bufio"
	"bytes"
	"cmp"
	_ "embed"
	"encoding/json"
	"io"
	"math"
	"slices"
	"strconv"
)

// The embedded small trace is SyntheticMooncake(smallTraceSeed,
// smallTraceRequests); a test keeps the file and the generator in step.
const (
	smallTraceSeed     = 1
	smallTraceRequests = 200
)

//go:embed testdata/mooncake_small.jsonl
var smallTrace []byte

// SmallTrace returns the embedded 200-request synthetic Mooncake trace
// (20 s at TimeScale 1), the default workload of a quick run.
func SmallTrace() io.Reader { return bytes.NewReader(smallTrace) }

// domainTrace separates the trace generator's stream from the token streams.
const domainTrace uint64 = 0x7472616365676e21 // "tracegn!"

// SyntheticMooncake generates a Mooncake trace with the sharing of
// production chat traffic: four system prompts of 2-5k tokens used with
// skewed popularity, multi-turn sessions whose every turn's hash ids extend
// the previous turn's (prompt + answer + new user message), one-off
// requests with and without a system prompt, and now and then a burst of
// sessions on one system prompt starting within a few tens of
// milliseconds. Timestamps are whole milliseconds.
func SyntheticMooncake(seed uint64, requests int) []MooncakeLine {
	const block = 512
	if requests <= 0 {
		return nil
	}
	r := seeded(domainTrace, seed)
	var next uint64
	extend := func(ids []uint64, tokens int) []uint64 {
		ids = slices.Clip(ids)
		for len(ids)*block < tokens {
			ids = append(ids, next)
			next++
		}
		return ids
	}
	systems := make([][]uint64, 4)
	for i := range systems {
		systems[i] = extend(nil, r.between(4, 10)*block)
	}
	popular := func() []uint64 {
		switch u := r.float(); {
		case u < 0.45:
			return systems[0]
		case u < 0.70:
			return systems[1]
		case u < 0.90:
			return systems[2]
		default:
			return systems[3]
		}
	}
	var (
		out      []MooncakeLine
		now      float64 // ms
		sessions int
	)
	conversation := func(start float64, sys []uint64, turns int, think []float64) {
		sessions++
		id := "conv-" + strconv.Itoa(sessions)
		input := len(sys)*block + r.between(64, 1500)
		ids := extend(sys, input)
		ts := start
		for t := range turns {
			outLen := r.between(16, 300)
			out = append(out, MooncakeLine{Timestamp: math.Round(ts), InputLength: input, OutputLength: outLen, HashIDs: ids, SessionID: id})
			if t+1 < turns {
				// The next message comes after the answer streamed (about
				// 15 ms a token) and the user read it.
				ts += float64(outLen)*15 + think[t]
				input += outLen + r.between(32, 600)
				ids = extend(ids, input)
			}
		}
	}
	thinks := func(n int) []float64 {
		t := make([]float64, n)
		for i := range t {
			t[i] = float64(r.between(800, 4000))
		}
		return t
	}
	// Generate past the target so that truncating to the earliest lines
	// keeps whole early sessions rather than only their first turns.
	for arrivals := 1; len(out) < requests+requests/3; arrivals++ {
		now += -math.Log(1-r.float()) * 220
		switch u := r.float(); {
		case arrivals%15 == 0:
			sys, think := popular(), thinks(6)
			for range 6 {
				conversation(now+float64(r.intn(40)), sys, r.between(2, 5), think)
			}
		case u < 0.20:
			input := r.between(200, 3000)
			out = append(out, MooncakeLine{Timestamp: math.Round(now), InputLength: input, OutputLength: r.between(16, 300), HashIDs: extend(nil, input)})
		case u < 0.35:
			sys := popular()
			input := len(sys)*block + r.between(64, 1500)
			out = append(out, MooncakeLine{Timestamp: math.Round(now), InputLength: input, OutputLength: r.between(16, 300), HashIDs: extend(sys, input)})
		default:
			conversation(now, popular(), r.between(2, 6), thinks(5))
		}
	}
	slices.SortStableFunc(out, func(a, b MooncakeLine) int { return cmp.Compare(a.Timestamp, b.Timestamp) })
	return out[:requests]
}

// WriteMooncake writes lines as a Mooncake trace with keys in the order
// of the published traces.
func WriteMooncake(w io.Writer, lines []MooncakeLine) error {
	bw := bufio.NewWriter(w)
	var buf []byte
	for _, l := range lines {
		buf = append(buf[:0], `{"timestamp": `...)
		buf = strconv.AppendFloat(buf, l.Timestamp, 'f', -1, 64)
		buf = append(buf, `, "input_length": `...)
		buf = strconv.AppendInt(buf, int64(l.InputLength), 10)
		buf = append(buf, `, "output_length": `...)
		buf = strconv.AppendInt(buf, int64(l.OutputLength), 10)
		buf = append(buf, `, "hash_ids": [`...)
		for i, h := range l.HashIDs {
			if i > 0 {
				buf = append(buf, ", "...)
			}
			buf = strconv.AppendUint(buf, h, 10)
		}
		buf = append(buf, ']')
		if l.SessionID != "" {
			buf = append(buf, `, "session_id": `...)
			quoted, err := json.Marshal(l.SessionID)
			if err != nil {
				return err
			}
			buf = append(buf, quoted...)
		}
		buf = append(buf, "}\n"...)
		if _, err := bw.Write(buf); err != nil {
			return err
		}
	}
	return bw.Flush()
}
