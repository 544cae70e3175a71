// This file holds the reader of an OpenAI completion stream: server-sent events, usage, errors.

package loadgen

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Errors a request can end with, besides transport errors.
var (
	// ErrStatus: the server answered with a non-2xx status.
	ErrStatus = errors.New("http status")
	// ErrStream: the event stream was malformed, reported an error, or
	// ended before "data: [DONE]".
	ErrStream = errors.New("bad event stream")
	// ErrNoUsage: the stream completed without a usage chunk, so the
	// request's cache figures are unknown.
	ErrNoUsage = errors.New("no usage in stream")
)

// maxEventBytes bounds one server-sent event; usage and token chunks are a
// few hundred bytes.
const maxEventBytes = 1 << 20

// Usage is what the final chunk reports about a request.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	// CachedTokens is usage.prompt_tokens_details.cached_tokens.
	CachedTokens int
	// LocalCachedTokens and PeerRestoredTokens come from the kvrouter
	// extension, usage.kvrouter; Extension says whether it was there.
	LocalCachedTokens  int
	PeerRestoredTokens int
	Extension          bool
}

// usageJSON is the wire shape of Usage.
type usageJSON struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	KVRouter *struct {
		PeerRestoredTokens int `json:"peer_restored_tokens"`
		LocalCachedTokens  int `json:"local_cached_tokens"`
	} `json:"kvrouter"`
}

// chunkJSON is one streamed completion chunk. Engines report a mid-stream
// failure either as {"error": {...}} (vLLM) or as an error object itself
// ({"object": "error", "message": ...}).
type chunkJSON struct {
	Choices []struct {
		Text string `json:"text"`
	} `json:"choices"`
	Usage   *usageJSON `json:"usage"`
	Object  string     `json:"object"`
	Message string     `json:"message"`
	Error   *struct {
		Message string `json:"message"`
	} `json:"error"`
}

type event int

const (
	eventOther event = iota // a chunk without text: role, usage, keep-alive
	eventToken              // a chunk carrying generated text
	eventDone               // data: [DONE]
)

// streamReader reads an OpenAI completion stream (server-sent events) one
// event at a time. It keeps the last usage it saw.
type streamReader struct {
	br    *bufio.Reader
	data  []byte
	usage *Usage
}

func newStreamReader(r io.Reader) *streamReader {
	return &streamReader{br: bufio.NewReaderSize(r, 4096)}
}

// next reads up to the end of the next event and classifies it. A clean
// end of input before [DONE] is ErrStream.
func (s *streamReader) next() (event, error) {
	s.data = s.data[:0]
	hasData := false
	for {
		line, err := s.line()
		if err == io.EOF && hasData {
			return s.dispatch() // a last event without its blank line
		}
		if err != nil {
			if err == io.EOF {
				return eventOther, fmt.Errorf("%w: ended before data: [DONE]", ErrStream)
			}
			return eventOther, err
		}
		if len(line) == 0 {
			if !hasData {
				continue // a blank line between events, or after a comment
			}
			return s.dispatch()
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		if string(field) != "data" {
			continue // comments (":"), event:, id:, retry:
		}
		value = bytes.TrimPrefix(value, []byte(" "))
		if hasData {
			s.data = append(s.data, '\n')
		}
		if len(s.data)+len(value) > maxEventBytes {
			return eventOther, fmt.Errorf("%w: an event exceeds %d bytes", ErrStream, maxEventBytes)
		}
		s.data = append(s.data, value...)
		hasData = true
	}
}

// line returns the next line without its end of line (\n, \r\n or \r\n
// split across reads).
func (s *streamReader) line() ([]byte, error) {
	line, err := s.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		long := append([]byte(nil), line...)
		for err == bufio.ErrBufferFull {
			if len(long) > maxEventBytes {
				return nil, fmt.Errorf("%w: a line exceeds %d bytes", ErrStream, maxEventBytes)
			}
			line, err = s.br.ReadSlice('\n')
			long = append(long, line...)
		}
		line = long
	}
	if err != nil && (err != io.EOF || len(line) == 0) {
		return nil, err
	}
	line = bytes.TrimSuffix(line, []byte("\n"))
	return bytes.TrimSuffix(line, []byte("\r")), nil
}

func (s *streamReader) dispatch() (event, error) {
	if string(s.data) == "[DONE]" {
		return eventDone, nil
	}
	var c chunkJSON
	if err := json.Unmarshal(s.data, &c); err != nil {
		return eventOther, fmt.Errorf("%w: chunk %.80q: %v", ErrStream, s.data, err)
	}
	switch {
	case c.Error != nil:
		return eventOther, fmt.Errorf("%w: server error: %s", ErrStream, c.Error.Message)
	case c.Object == "error":
		return eventOther, fmt.Errorf("%w: server error: %s", ErrStream, c.Message)
	}
	if c.Usage != nil {
		u := &Usage{PromptTokens: c.Usage.PromptTokens, CompletionTokens: c.Usage.CompletionTokens}
		if d := c.Usage.PromptTokensDetails; d != nil {
			u.CachedTokens = d.CachedTokens
		}
		if k := c.Usage.KVRouter; k != nil {
			u.LocalCachedTokens, u.PeerRestoredTokens, u.Extension = k.LocalCachedTokens, k.PeerRestoredTokens, true
		}
		s.usage = u
	}
	for _, ch := range c.Choices {
		if ch.Text != "" {
			return eventToken, nil
		}
	}
	return eventOther, nil
}
