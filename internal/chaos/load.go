// This file holds the chaos run's steady load: clients that check every answer against the reference output and count what failed, by cause.
package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"kvrouter/internal/cluster"
	"kvrouter/internal/mocker"
)

// Token ids that are plain text for the demo tokenizer (as the demo's seed
// scenario uses): above the byte tokens, below the special tokens.
const vocabLo, vocabHi = 256, 782

// Causes of client errors.
const (
	causeRefused     = "connection_refused" // the router is down
	causeReset       = "connection_reset"
	causeTimeout     = "timeout"
	causeEOF         = "eof" // the connection ended before an answer
	causeStreamError = "stream_error_event"
	causeStreamCut   = "stream_without_done"
	causeBadAnswer   = "malformed_answer"
	causeOther       = "other"
)

// workload makes the prompts: a set of documents clients share (their
// prefixes are what caches and hints are about), each request one of them
// followed by a suffix of its own.
type workload struct {
	docs      [][]uint32
	blockSize int
}

func newWorkload(seed uint64, docs, blockSize int) *workload {
	rng := rand.New(rand.NewPCG(seed, 0xc4a05))
	w := &workload{blockSize: blockSize}
	for range docs {
		w.docs = append(w.docs, randomTokens(rng, (2+rng.IntN(10))*blockSize))
	}
	return w
}

func randomTokens(rng *rand.Rand, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = vocabLo + uint32(rng.IntN(vocabHi-vocabLo))
	}
	return out
}

// prompt is a document, whole or cut at a block boundary, and a suffix.
func (w *workload) prompt(rng *rand.Rand) []uint32 {
	d := w.docs[rng.IntN(len(w.docs))]
	blocks := len(d) / w.blockSize
	n := (1 + rng.IntN(blocks)) * w.blockSize
	return append(append([]uint32(nil), d[:n]...), randomTokens(rng, rng.IntN(2*w.blockSize))...)
}

// tally is what the clients saw.
type tally struct {
	mu       sync.Mutex
	requests int
	ok       int
	wrong    int
	errors   map[string]int
	examples []string // a few wrong outputs, for the report
}

func (t *tally) add(cause string, wrong bool, example string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.requests++
	switch {
	case cause != "":
		t.errors[cause]++
	case wrong:
		t.wrong++
		if len(t.examples) < 4 {
			t.examples = append(t.examples, example)
		}
	default:
		t.ok++
	}
}

// client sends requests one at a time until ctx ends.
type client struct {
	id      int
	routers []string
	work    *workload
	ref     *mocker.Reference
	hc      *http.Client
	tally   *tally
	rng     *rand.Rand
}

func (c *client) run(ctx context.Context) {
	for n := 0; ctx.Err() == nil; n++ {
		router := c.routers[(c.id+n)%len(c.routers)]
		prompt := c.work.prompt(c.rng)
		maxTokens := 2 + c.rng.IntN(6)
		stream := c.rng.IntN(2) == 0
		text, cause := complete(ctx, c.hc, router, "", prompt, maxTokens, stream)
		if ctx.Err() != nil {
			return // cut by the end of the run, not by a fault
		}
		want := ""
		if cause == "" {
			want = c.ref.Text(prompt, maxTokens)
		}
		c.tally.add(cause, cause == "" && text != want, fmt.Sprintf("%d-token prompt: got %q, want %q", len(prompt), text, want))
		if cause == causeRefused {
			// The router is down: no point in spinning on it.
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

// complete sends one completion through router (forced to target when set)
// and returns its text, or the cause of its failure.
func complete(ctx context.Context, hc *http.Client, router, target string, prompt []uint32, maxTokens int, stream bool) (string, string) {
	body, _ := json.Marshal(map[string]any{"model": cluster.Model, "prompt": prompt, "max_tokens": maxTokens,
		"temperature": 0, "stream": stream})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, router+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return "", causeOther
	}
	req.Header.Set("Content-Type", "application/json")
	if target != "" {
		req.Header.Set(cluster.HeaderTarget, target)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", transportCause(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return "", fmt.Sprintf("http_%d", resp.StatusCode)
	}
	if !stream {
		var out struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			return "", transportCause(err)
		}
		if json.Unmarshal(b, &out) != nil || len(out.Choices) != 1 {
			return "", causeBadAnswer
		}
		return out.Choices[0].Text, ""
	}
	var text bytes.Buffer
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
		if !ok {
			continue
		}
		if string(data) == "[DONE]" {
			return text.String(), ""
		}
		var ev struct {
			Error   json.RawMessage `json:"error"`
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		if json.Unmarshal(data, &ev) != nil {
			return "", causeBadAnswer
		}
		if len(ev.Error) > 0 {
			return "", causeStreamError
		}
		for _, ch := range ev.Choices {
			text.WriteString(ch.Text)
		}
	}
	if err := sc.Err(); err != nil {
		return "", transportCause(err)
	}
	return "", causeStreamCut
}

func transportCause(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return causeRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return causeReset
	case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, context.DeadlineExceeded):
		return causeTimeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return causeEOF
	}
	return causeOther
}
