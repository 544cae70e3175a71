package loadgen

import (
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

func TestStreamReader(t *testing.T) {
	const usageExt = `{"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":64},"kvrouter":{"peer_restored_tokens":32,"local_cached_tokens":48}}}`
	tests := []struct {
		name   string
		stream string
		events []event
		usage  *Usage
		err    error
	}{{
		name:   "vLLM completion with usage and extension",
		stream: "data: {\"choices\":[{\"text\":\"\"}]}\n\ndata: {\"choices\":[{\"text\":\"a\"}],\"usage\":null}\n\ndata: {\"choices\":[{\"text\":\"b\",\"finish_reason\":\"length\"}]}\n\ndata: " + usageExt + "\n\ndata: [DONE]\n\n",
		events: []event{eventOther, eventToken, eventToken, eventOther, eventDone},
		usage:  &Usage{PromptTokens: 100, CompletionTokens: 3, CachedTokens: 64, LocalCachedTokens: 48, PeerRestoredTokens: 32, Extension: true},
	}, {
		name:   "usage without details or extension; CRLF; no space after data:",
		stream: "data:{\"choices\":[{\"text\":\"x\"}]}\r\n\r\ndata:{\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":1}}\r\n\r\ndata:[DONE]\r\n\r\n",
		events: []event{eventToken, eventOther, eventDone},
		usage:  &Usage{PromptTokens: 7, CompletionTokens: 1},
	}, {
		name:   "comments, event and id fields, and extra blank lines are not events",
		stream: ": keep-alive\n\n\n\nevent: message\nid: 4\ndata: {\"choices\":[{\"text\":\"x\"}]}\n\nretry: 10\n\ndata: [DONE]\n\n",
		events: []event{eventToken, eventDone},
	}, {
		name:   "an event split over two data lines",
		stream: "data: {\"choices\":\ndata: [{\"text\":\"x\"}]}\n\ndata: [DONE]\n\n",
		events: []event{eventToken, eventDone},
	}, {
		name:   "a second choice carries the text",
		stream: "data: {\"choices\":[{\"text\":\"\"},{\"text\":\"y\"}]}\n\ndata: [DONE]",
		events: []event{eventToken, eventDone},
	}, {
		name:   "ends before [DONE]",
		stream: "data: {\"choices\":[{\"text\":\"x\"}]}\n\n",
		events: []event{eventToken},
		err:    ErrStream,
	}, {
		name:   "vLLM mid-stream error",
		stream: "data: {\"choices\":[{\"text\":\"x\"}]}\n\ndata: {\"error\":{\"message\":\"boom\",\"code\":500}}\n\n",
		events: []event{eventToken},
		err:    ErrStream,
	}, {
		name:   "error object",
		stream: "data: {\"object\":\"error\",\"message\":\"boom\"}\n\n",
		err:    ErrStream,
	}, {
		name:   "not JSON",
		stream: "data: {\"choices\":\n\n",
		err:    ErrStream,
	}, {
		name:   "empty body",
		stream: "",
		err:    ErrStream,
	}}
	for _, tt := range tests {
		for _, reader := range []struct {
			name string
			wrap func(io.Reader) io.Reader
		}{{"whole", func(r io.Reader) io.Reader { return r }}, {"byte by byte", iotest.OneByteReader}} {
			t.Run(tt.name+"/"+reader.name, func(t *testing.T) {
				sr := newStreamReader(reader.wrap(strings.NewReader(tt.stream)))
				var got []event
				var err error
				for {
					var ev event
					if ev, err = sr.next(); err != nil {
						break
					}
					got = append(got, ev)
					if ev == eventDone {
						break
					}
				}
				if !slices.Equal(got, tt.events) {
					t.Errorf("events %v, want %v", got, tt.events)
				}
				if !errors.Is(err, tt.err) {
					t.Errorf("error %v, want %v", err, tt.err)
				}
				if tt.err == nil && (sr.usage == nil) != (tt.usage == nil) || sr.usage != nil && tt.usage != nil && *sr.usage != *tt.usage {
					t.Errorf("usage %+v, want %+v", sr.usage, tt.usage)
				}
			})
		}
	}
}

func TestStreamReaderLimits(t *testing.T) {
	long := "data: " + strings.Repeat("x", maxEventBytes+10) + "\n\n"
	if _, err := newStreamReader(strings.NewReader(long)).next(); !errors.Is(err, ErrStream) {
		t.Fatalf("an over-long line: %v", err)
	}
	many := strings.Repeat("data: "+strings.Repeat("x", 1000)+"\n", maxEventBytes/1000+2) + "\n"
	if _, err := newStreamReader(strings.NewReader(many)).next(); !errors.Is(err, ErrStream) {
		t.Fatalf("an over-long event: %v", err)
	}
	fine := "data: {\"choices\":[{\"text\":\"" + strings.Repeat("x", 10000) + "\"}]}\n\n"
	if ev, err := newStreamReader(strings.NewReader(fine)).next(); err != nil || ev != eventToken {
		t.Fatalf("a 10 kB chunk: %v %v", ev, err)
	}
}

// FuzzStreamReader: streams come from servers we do not control. The
// reader never panics, always terminates, and classifies consistently.
func FuzzStreamReader(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"usage\":{\"prompt_tokens\":1,\"kvrouter\":{\"peer_restored_tokens\":1}}}\n\ndata: [DONE]\n\n"))
	f.Add([]byte(": c\r\ndata:{\"error\":{}}\r\n\r\n"))
	f.Add([]byte("data\ndata:\n\ndata: [DONE]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		sr := newStreamReader(strings.NewReader(string(data)))
		for range len(data) + 2 {
			ev, err := sr.next()
			if err != nil {
				if !errors.Is(err, ErrStream) {
					t.Fatalf("error outside ErrStream: %v", err)
				}
				return
			}
			if ev == eventDone {
				return
			}
		}
		t.Fatalf("more events than bytes in %q", data)
	})
}
