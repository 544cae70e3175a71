package mocker

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// sseChunks reads a server-sent event stream to its [DONE] marker.
func sseChunks(t *testing.T, resp *http.Response) []json.RawMessage {
	t.Helper()
	if ct := resp.Header.Get(headerContentType); ct != contentSSE {
		t.Fatalf("content type %q", ct)
	}
	var chunks []json.RawMessage
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, sseData)
		if !ok {
			t.Fatalf("line %q is not an SSE data line", line)
		}
		if data == "[DONE]" {
			return chunks
		}
		chunks = append(chunks, json.RawMessage(data))
	}
	t.Fatalf("stream ended without [DONE]: %v", sc.Err())
	return nil
}

type streamChunk struct {
	Object  string `json:"object"`
	Choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Role    string  `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
}

// TestStreamEqualsWhole: streamed chunks concatenate to the non-streamed
// answer, for completions and chat, and the usage chunk agrees.
func TestStreamEqualsWhole(t *testing.T) {
	e := startEngine(t, nil)
	prompt := longPrompt(t, e, "stream", 200)
	cases := []struct {
		name string
		path string
		body map[string]any
	}{
		{"completions", pathCompletions, map[string]any{"prompt": prompt, "max_tokens": 40}},
		{"chat", pathChat, map[string]any{"messages": []map[string]any{{"role": "system", "content": "Be brief."}, {"role": "user", "content": prompt}}, "max_tokens": 40}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var whole completion
			if code := post(t, e.URL()+c.path, c.body, &whole); code != http.StatusOK {
				t.Fatalf("status %d", code)
			}
			c.body["stream"] = true
			c.body["stream_options"] = map[string]any{"include_usage": true}
			resp, err := http.Post(e.URL()+c.path, contentJSON, jsonBody(t, c.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var text strings.Builder
			var finish string
			var u *usage
			for i, raw := range sseChunks(t, resp) {
				var ch streamChunk
				if err := json.Unmarshal(raw, &ch); err != nil {
					t.Fatal(err)
				}
				if c.path == pathChat && i == 0 && (len(ch.Choices) != 1 || ch.Choices[0].Delta.Role != roleAssistant) {
					t.Fatalf("first chat chunk %s", raw)
				}
				if ch.Usage != nil {
					u = ch.Usage
				}
				for _, choice := range ch.Choices {
					text.WriteString(choice.Text)
					if choice.Delta.Content != nil {
						text.WriteString(*choice.Delta.Content)
					}
					if choice.FinishReason != nil {
						finish = *choice.FinishReason
					}
				}
			}
			if text.String() != whole.text() || whole.text() == "" {
				t.Fatalf("stream %q, whole %q", text.String(), whole.text())
			}
			if finish != finishLength || whole.Choices[0].FinishReason != finishLength {
				t.Fatalf("finish reasons %q and %q", finish, whole.Choices[0].FinishReason)
			}
			if u == nil || u.CompletionTokens != 40 || u.PromptTokens != whole.Usage.PromptTokens || u.TotalTokens != u.PromptTokens+40 {
				t.Fatalf("stream usage %+v, whole %+v", u, whole.Usage)
			}
		})
	}
}

// TestCancelFreesBlocks: a client that goes away stops its request, which
// frees its GPU blocks; the prompt's blocks stay cached for reuse.
func TestCancelFreesBlocks(t *testing.T) {
	e := startEngine(t, func(c *Config) { c.Speedup = 1; c.DecodePerToken = 20 * time.Millisecond })
	prompt := longPrompt(t, e, "cancel", 300)
	body := map[string]any{"prompt": prompt, "max_tokens": 5000}
	t.Run("stream", func(t *testing.T) {
		body["stream"] = true
		ctx, cancel := context.WithCancel(testCtx(t))
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.URL()+pathCompletions, jsonBody(t, body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, sseData) {
			t.Fatalf("first line %q: %v", line, err)
		}
		if st := e.ranks[0].stats(); st.Running != 1 || st.GPUUsed == 0 {
			t.Fatalf("streaming request not running: %+v", st)
		}
		cancel()
		resp.Body.Close()
		checkFreed(t, e)
	})
	t.Run("whole", func(t *testing.T) {
		body["stream"] = false
		ctx, cancel := context.WithCancel(testCtx(t))
		done := make(chan struct{})
		go func() {
			defer close(done)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.URL()+pathCompletions, jsonBody(t, body))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		for e.ranks[0].stats().Running == 0 {
			if testCtx(t).Err() != nil {
				t.Fatal("request never started")
			}
			time.Sleep(time.Millisecond)
		}
		cancel()
		<-done
		checkFreed(t, e)
	})
}

func checkFreed(t *testing.T, e *Engine) {
	t.Helper()
	if err := e.Idle(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	st := e.ranks[0].stats()
	if st.Running != 0 || st.Waiting != 0 || st.GPUUsed != 0 || st.GPUCached == 0 {
		t.Fatalf("after cancel: %+v", st)
	}
	assertMetric(t, e, metricGPUUsed+`{dp_rank="0"} 0`)
}
