package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTokenizeCmd(t *testing.T) {
	dir := t.TempDir()
	tok, err := os.ReadFile("../../internal/tokenizer/testdata/llama3-mini.json")
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("tokenizer.json", string(tok))
	write("tokenizer_config.json", `{"bos_token":"<|begin_of_text|>","chat_template":"{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"}`)
	chat := write("chat.json", `{"model":"m","messages":[{"role":"user","content":"Hello"}]}`)
	run := func(args ...string) (string, error) {
		cmd := newTokenizeCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetArgs(args)
		err := cmd.Execute()
		return out.String(), err
	}
	var got struct {
		TokenIDs []uint32 `json:"token_ids"`
		Text     string   `json:"text"`
	}
	out, err := run("--tokenizer", dir, "--chat", chat, "--json")
	if err != nil || json.Unmarshal([]byte(out), &got) != nil || got.Text != "<|begin_of_text|>Hello" || len(got.TokenIDs) != 2 {
		t.Fatalf("--chat: %q, %v", out, err)
	}
	out, err = run("--tokenizer", filepath.Join(dir, "tokenizer.json"), "--text", "Hello", "--add-special-tokens", "--json")
	if err != nil || !strings.Contains(out, `"token_ids":[128000,9906]`) {
		t.Fatalf("--text: %q, %v", out, err)
	}
	for _, args := range [][]string{
		{"--text", "x"},
		{"--tokenizer", dir},
		{"--tokenizer", dir, "--text", "x", "--chat", chat},
		{"--tokenizer", write("bad.json", `{"model":{"type":"WordPiece","vocab":{}}}`), "--text", "x"},
		{"--tokenizer", dir, "--chat", write("badchat.json", `{"messages":`)},
	} {
		if _, err := run(args...); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
	if _, err := run("--tokenizer", write("bad2.json", `{"model":{"type":"WordPiece","vocab":{}}}`), "--text", "x"); err == nil || !strings.Contains(err.Error(), "WordPiece") {
		t.Errorf("unsupported model: %v, want the type named", err)
	}
}
