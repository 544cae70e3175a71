// This file holds the chat templates: the built-in formats, their detection, Go text/templates.

package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"text/template"
	"unicode"
)

// Message is one chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Template renders chat messages into the prompt text an engine would
// tokenize. Encode the result with addSpecial=false: the formats carry
// their own BOS, as engines assume for chat requests.
type Template interface {
	Render(msgs []Message, addGenerationPrompt bool) (string, error)
}

var (
	// ErrUnknownTemplate is returned for a template name or a
	// chat_template that matches no built-in format.
	ErrUnknownTemplate = errors.New("unknown chat template")
	// ErrBadMessage is returned for a message a template cannot render.
	ErrBadMessage = errors.New("bad chat message")
)

// ChatML is the <|im_start|>role\ncontent<|im_end|>\n format of Qwen and
// many others.
type ChatML struct {
	// DefaultSystem, if set, is the system message rendered when the
	// conversation does not start with one (Qwen2 and Qwen2.5 do this).
	DefaultSystem string
	// ToolResponses renders "tool" messages as Qwen2.5 and Qwen3 do: a run
	// of them becomes one user turn of <tool_response> blocks.
	ToolResponses bool
}

var _ Template = ChatML{}

// Render implements Template.
func (c ChatML) Render(msgs []Message, addGenerationPrompt bool) (string, error) {
	var b strings.Builder
	if c.DefaultSystem != "" && len(msgs) > 0 && msgs[0].Role != "system" {
		b.WriteString("<|im_start|>system\n" + c.DefaultSystem + "<|im_end|>\n")
	}
	for i, m := range msgs {
		if err := checkRole(i, m.Role); err != nil {
			return "", err
		}
		if c.ToolResponses && m.Role == "tool" {
			if i == 0 || msgs[i-1].Role != "tool" {
				b.WriteString("<|im_start|>user")
			}
			b.WriteString("\n<tool_response>\n" + m.Content + "\n</tool_response>")
			if i == len(msgs)-1 || msgs[i+1].Role != "tool" {
				b.WriteString("<|im_end|>\n")
			}
			continue
		}
		b.WriteString("<|im_start|>" + m.Role + "\n" + m.Content + "<|im_end|>\n")
	}
	if addGenerationPrompt {
		b.WriteString("<|im_start|>assistant\n")
	}
	return b.String(), nil
}

// Llama3 is the format of Llama 3 and 3.0-style templates: a BOS, then
// headers around each message, with the content trimmed as the template's
// Jinja `trim` does. The date preamble of Llama 3.1 and later is not
// produced.
type Llama3 struct{}

var _ Template = Llama3{}

// Render implements Template.
func (Llama3) Render(msgs []Message, addGenerationPrompt bool) (string, error) {
	var b strings.Builder
	if len(msgs) > 0 {
		// The template puts the BOS before the first message.
		b.WriteString("<|begin_of_text|>")
	}
	for i, m := range msgs {
		if err := checkRole(i, m.Role); err != nil {
			return "", err
		}
		b.WriteString("<|start_header_id|>" + m.Role + "<|end_header_id|>\n\n" + pyStrip(m.Content) + "<|eot_id|>")
	}
	if addGenerationPrompt {
		b.WriteString("<|start_header_id|>assistant<|end_header_id|>\n\n")
	}
	return b.String(), nil
}

// Plain renders "role: content" lines, for models without a chat format.
type Plain struct{}

var _ Template = Plain{}

// Render implements Template.
func (Plain) Render(msgs []Message, addGenerationPrompt bool) (string, error) {
	var b strings.Builder
	for i, m := range msgs {
		if err := checkRole(i, m.Role); err != nil {
			return "", err
		}
		b.WriteString(m.Role + ": " + m.Content + "\n")
	}
	if addGenerationPrompt {
		b.WriteString("assistant: ")
	}
	return b.String(), nil
}

// checkRole refuses roles that would let a message forge the markers
// around it.
func checkRole(i int, role string) error {
	if role == "" || strings.ContainsAny(role, "\n<>|") {
		return fmt.Errorf("tokenizer: messages[%d].role %q: %w", i, role, ErrBadMessage)
	}
	return nil
}

// pyStrip is Python's str.strip(), which Jinja's trim filter calls; its
// whitespace includes the separators U+001C to U+001F, unlike Go's.
func pyStrip(s string) string {
	return strings.TrimFunc(s, func(r rune) bool {
		return 0x1C <= r && r <= 0x1F || unicode.IsSpace(r)
	})
}

const (
	qwenSystem   = "You are a helpful assistant."
	qwen25System = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
)

var builtin = map[string]Template{
	"chatml":  ChatML{},
	"qwen2":   ChatML{DefaultSystem: qwenSystem},
	"qwen2.5": ChatML{DefaultSystem: qwen25System, ToolResponses: true},
	"qwen3":   ChatML{ToolResponses: true},
	"llama3":  Llama3{},
	"plain":   Plain{},
}

// TemplateNames lists the names TemplateByName accepts.
func TemplateNames() []string {
	names := make([]string, 0, len(builtin))
	for n := range builtin {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// TemplateByName returns a built-in template: "chatml", "qwen2",
// "qwen2.5", "qwen3", "llama3" or "plain".
func TemplateByName(name string) (Template, error) {
	if t, ok := builtin[name]; ok {
		return t, nil
	}
	return nil, fmt.Errorf("tokenizer: chat template %q (known: %s): %w", name, strings.Join(TemplateNames(), ", "), ErrUnknownTemplate)
}

// DetectTemplate picks the built-in format of a tokenizer_config.json
// chat_template by the marker tokens it contains. The Jinja program itself
// is not executed, so a template that adds text the built-in format does
// not (dates, tool schemas) is refused rather than approximated.
func DetectTemplate(chatTemplate string) (Template, error) {
	switch {
	case strings.TrimSpace(chatTemplate) == "":
		return nil, fmt.Errorf("tokenizer: chat_template is empty: %w", ErrUnknownTemplate)
	case strings.Contains(chatTemplate, "<|start_header_id|>"):
		if strings.Contains(chatTemplate, "Cutting Knowledge Date") {
			return nil, fmt.Errorf("tokenizer: chat_template is Llama 3.1 or later, whose date preamble is not built in; configure a Go text/template: %w", ErrUnknownTemplate)
		}
		return Llama3{}, nil
	case strings.Contains(chatTemplate, "<|im_start|>"):
		c := ChatML{ToolResponses: strings.Contains(chatTemplate, "<tool_response>")}
		switch {
		case strings.Contains(chatTemplate, qwen25System):
			c.DefaultSystem = qwen25System
		case strings.Contains(chatTemplate, qwenSystem):
			c.DefaultSystem = qwenSystem
		}
		return c, nil
	}
	return nil, fmt.Errorf("tokenizer: chat_template has none of the markers of the built-in formats (<|im_start|>, <|start_header_id|>); configure a Go text/template: %w", ErrUnknownTemplate)
}

// GoTemplate renders messages with a Go text/template, for formats that
// are not built in. The template sees .Messages ([]Message) and
// .AddGenerationPrompt (bool), and the function trim (Jinja's trim).
type GoTemplate struct {
	t *template.Template
}

var _ Template = (*GoTemplate)(nil)

// NewTemplate parses a Go text/template; see GoTemplate.
func NewTemplate(name, text string) (*GoTemplate, error) {
	t, err := template.New(name).Option("missingkey=error").Funcs(template.FuncMap{"trim": pyStrip}).Parse(text)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: chat template %q: %w", name, err)
	}
	return &GoTemplate{t: t}, nil
}

// Render implements Template.
func (g *GoTemplate) Render(msgs []Message, addGenerationPrompt bool) (string, error) {
	var b strings.Builder
	data := struct {
		Messages            []Message
		AddGenerationPrompt bool
	}{msgs, addGenerationPrompt}
	if err := g.t.Execute(&b, data); err != nil {
		return "", fmt.Errorf("tokenizer: chat template %q: %w", g.t.Name(), err)
	}
	return b.String(), nil
}

// BuiltinChatTemplate returns a built-in format (one of TemplateNames) as a
// ChatTemplate, so that the demo tokenizer's simulated fleet and a
// --chat-template naming a format go through Model.RenderChat like a real
// model's Jinja template. Message content is flattened to text as
// FlattenContent does; tools and chat_template_kwargs other than
// add_generation_prompt do not shape these formats.
func BuiltinChatTemplate(name string) (*ChatTemplate, error) {
	t, err := TemplateByName(name)
	if err != nil {
		return nil, err
	}
	return &ChatTemplate{builtin: t, name: name}, nil
}

// applyBuiltin renders req with a built-in format.
func (c *ChatTemplate) applyBuiltin(req *ChatRequest) (string, error) {
	addGen := req.AddGenerationPrompt == nil || *req.AddGenerationPrompt
	if !isNull(req.ChatTemplateKwargs) {
		var kw map[string]json.RawMessage
		if err := json.Unmarshal(req.ChatTemplateKwargs, &kw); err != nil {
			return "", fmt.Errorf("chat request: chat_template_kwargs: want an object: %w", ErrBadMessage)
		}
		if v, ok := kw["add_generation_prompt"]; ok {
			addGen = string(v) == "true"
		}
	}
	if req.ContinueFinalMessage {
		return "", fmt.Errorf("chat request: continue_final_message: the built-in format %q does not support it: %w", c.name, ErrBadMessage)
	}
	var raw []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(req.Messages, &raw); err != nil {
		return "", fmt.Errorf("chat request: messages: want a list of {role, content}: %w", ErrBadMessage)
	}
	msgs := make([]Message, len(raw))
	for i, m := range raw {
		text, err := FlattenContent(m.Content)
		if err != nil {
			return "", fmt.Errorf("chat request: messages[%d]: %w", i, err)
		}
		msgs[i] = Message{Role: m.Role, Content: text}
	}
	return c.builtin.Render(msgs, addGen)
}
