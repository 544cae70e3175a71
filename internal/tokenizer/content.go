// This file holds a chat message's content flattened to text, and a config's chat_template.

package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ErrUnsupportedContent is returned for message content that is not text,
// such as image parts, which the built-in templates cannot place.
var ErrUnsupportedContent = errors.New("unsupported message content")

// FlattenContent turns the "content" of an OpenAI chat message into text:
// a string is returned as is, null as "", and an array of content parts
// as its text parts joined by newlines, which is how vLLM flattens them
// for templates that expect a string.
func FlattenContent(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return "", nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("tokenizer: content: %w", err)
		}
		return s, nil
	case '[':
		var parts []struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(raw, &parts); err != nil {
			return "", fmt.Errorf("tokenizer: content: want a string or an array of content parts: %w", err)
		}
		texts := make([]string, 0, len(parts))
		for i, p := range parts {
			if p.Type != "text" {
				return "", fmt.Errorf("tokenizer: content[%d].type %q (only \"text\" parts): %w", i, p.Type, ErrUnsupportedContent)
			}
			if p.Text == nil {
				return "", fmt.Errorf("tokenizer: content[%d].text: missing: %w", i, ErrUnsupportedContent)
			}
			texts = append(texts, *p.Text)
		}
		return strings.Join(texts, "\n"), nil
	}
	return "", fmt.Errorf("tokenizer: content: want a string, null or an array of content parts, got %.20q: %w", raw, ErrUnsupportedContent)
}

// ConfigChatTemplate returns the chat_template of a tokenizer_config.json:
// the string itself, or the one named "default" when the file lists
// several.
func ConfigChatTemplate(tokenizerConfig []byte) (string, error) {
	var cfg struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if err := json.Unmarshal(tokenizerConfig, &cfg); err != nil {
		return "", fmt.Errorf("tokenizer: tokenizer_config.json: %w", err)
	}
	if isNull(cfg.ChatTemplate) {
		return "", fmt.Errorf("tokenizer: tokenizer_config.json: chat_template: missing: %w", ErrUnknownTemplate)
	}
	var s string
	if err := json.Unmarshal(cfg.ChatTemplate, &s); err == nil {
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(cfg.ChatTemplate, &named); err != nil {
		return "", fmt.Errorf("tokenizer: tokenizer_config.json: chat_template: want a string or a list of {name, template}: %w", err)
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
	}
	return "", fmt.Errorf("tokenizer: tokenizer_config.json: chat_template: no template named \"default\": %w", ErrUnknownTemplate)
}
