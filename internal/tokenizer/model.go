// This file holds Model: a tokenizer as an engine loads it, from its tokenizer files and chat template.

package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/ardanlabs/jinja"
)

// Model is a model's tokenizer, special-token settings and chat template.
type Model struct {
	Tok *Tokenizer
	// Config is nil when there is no tokenizer_config.json.
	Config *Config
	// Chat is the default chat template, and ToolChat the "tool_use" one
	// of configs that name several (nil when absent).
	Chat, ToolChat *ChatTemplate
}

// LoadModel loads a tokenizer the way vLLM and SGLang do through
// transformers' AutoTokenizer. path is a tokenizer.json or a directory
// holding one, with tokenizer_config.json and chat_template.jinja read from
// the directory when present. configPath, if set, names the
// tokenizer_config.json to use instead.
func LoadModel(path, configPath string) (*Model, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	dir, tokPath := filepath.Dir(path), path
	if st.IsDir() {
		dir, tokPath = path, filepath.Join(path, "tokenizer.json")
		if _, err := os.Stat(tokPath); err != nil {
			return nil, fmt.Errorf("tokenizer: %s holds no tokenizer.json (only fast tokenizers, saved as tokenizer.json, are supported): %w", path, ErrUnsupported)
		}
	}
	tok, err := LoadFile(tokPath)
	if err != nil {
		return nil, err
	}
	m := &Model{Tok: tok}
	if configPath == "" && st.IsDir() {
		if p := filepath.Join(dir, "tokenizer_config.json"); fileExists(p) {
			configPath = p
		}
	}
	if configPath != "" {
		data, err := os.ReadFile(configPath)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
		if m.Config, err = ParseConfig(data); err != nil {
			return nil, fmt.Errorf("%s: %w", configPath, err)
		}
	}
	if st.IsDir() {
		// transformers saves the template beside the config since 4.47,
		// and reads the file in preference to the config's field.
		if data, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
			if m.Config == nil {
				m.Config = &Config{SpecialTokens: map[string]string{}, ChatTemplates: map[string]string{}}
			}
			m.Config.ChatTemplates["default"] = string(data)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
	}
	if err := m.configure(); err != nil {
		return nil, err
	}
	return m, nil
}

// NewModel builds a Model from a tokenizer and a parsed config (which may
// be nil).
func NewModel(tok *Tokenizer, cfg *Config) (*Model, error) {
	m := &Model{Tok: tok, Config: cfg}
	return m, m.configure()
}

func (m *Model) configure() error {
	p, ok, err := m.Config.postProcessorFor(m.Tok)
	if err != nil {
		return err
	}
	if ok {
		t := *m.Tok
		t.post = p
		m.Tok = &t
	}
	if m.Config == nil {
		return nil
	}
	for name, dst := range map[string]**ChatTemplate{"default": &m.Chat, "tool_use": &m.ToolChat} {
		src, ok := m.Config.ChatTemplates[name]
		if !ok {
			continue
		}
		if *dst, err = NewChatTemplate(src); err != nil {
			return fmt.Errorf("tokenizer_config.json: chat_template %q: %w", name, err)
		}
	}
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// LoadChatTemplate reads a chat template given as an engine's
// --chat-template is: the path of a Jinja file, or here also the name of a
// built-in format (one of TemplateNames).
func LoadChatTemplate(nameOrPath string) (*ChatTemplate, error) {
	if t, err := BuiltinChatTemplate(nameOrPath); err == nil {
		return t, nil
	}
	src, err := os.ReadFile(nameOrPath)
	if err != nil {
		return nil, fmt.Errorf("not one of the built-in formats (%s) and not a readable Jinja file: %w",
			strings.Join(TemplateNames(), ", "), err)
	}
	return NewChatTemplate(string(src))
}

// SetChatTemplate replaces the model's chat template, as an engine's
// --chat-template does.
func (m *Model) SetChatTemplate(c *ChatTemplate) { m.Chat, m.ToolChat = c, nil }

// EncodeText tokenizes a completion prompt as engines do: with the
// tokenizer's special tokens (a BOS for most models) when addSpecial is
// set, which is vLLM's and SGLang's default for /v1/completions.
func (m *Model) EncodeText(text string, addSpecial bool) []uint32 {
	return m.Tok.Encode(text, addSpecial)
}

// ErrNoChatTemplate is a chat request for a model without a chat
// template.
var ErrNoChatTemplate = errors.New("no chat template")

// RenderChat renders a chat request into the prompt text, as vLLM does
// through transformers' apply_chat_template.
func (m *Model) RenderChat(req *ChatRequest) (string, error) {
	tmpl := m.Chat
	if m.ToolChat != nil && !isNull(req.Tools) && strings.TrimSpace(string(req.Tools)) != "[]" {
		tmpl = m.ToolChat
	}
	if tmpl == nil {
		return "", fmt.Errorf("tokenizer: %w (give one with --chat-template)", ErrNoChatTemplate)
	}
	return tmpl.Apply(req, m.Config)
}

// EncodeChat renders a chat request and tokenizes the prompt without
// adding special tokens: the template carries them, and vLLM and SGLang
// both tokenize chat prompts with add_special_tokens=False.
func (m *Model) EncodeChat(req *ChatRequest) (string, []uint32, error) {
	text, err := m.RenderChat(req)
	if err != nil {
		return "", nil, err
	}
	return text, m.Tok.Encode(text, false), nil
}

// Apply renders req with the special tokens of cfg (which may be nil).
func (c *ChatTemplate) Apply(req *ChatRequest, cfg *Config) (string, error) {
	if c.builtin != nil {
		return c.applyBuiltin(req)
	}
	addGen := req.AddGenerationPrompt == nil || *req.AddGenerationPrompt
	vars := map[string]jinja.Value{}
	for k, v := range cfg.templateVars() {
		vars[k] = jinja.FromGoValue(v)
	}
	msgs, err := conversation(req.Messages, c.openai)
	if err != nil {
		return "", fmt.Errorf("chat request: %w", err)
	}
	tools, err := toolSchemas(req.Tools)
	if err != nil {
		return "", fmt.Errorf("chat request: %w", err)
	}
	docs := jinja.None()
	if !isNull(req.Documents) {
		if docs, err = decodeOrdered(req.Documents); err != nil {
			return "", fmt.Errorf("chat request: documents: %w: %w", ErrBadMessage, err)
		}
	}
	vars["messages"], vars["tools"], vars["documents"] = msgs, tools, docs
	vars["add_generation_prompt"] = jinja.NewBool(addGen)
	if req.ReasoningEffort != nil {
		vars["reasoning_effort"] = jinja.NewString(*req.ReasoningEffort)
	}
	if !isNull(req.ChatTemplateKwargs) {
		kw, err := decodeOrdered(req.ChatTemplateKwargs)
		if err != nil || !kw.IsDict() {
			return "", fmt.Errorf("chat request: chat_template_kwargs: want an object: %w", ErrBadMessage)
		}
		for _, k := range kw.AsDict().OrderedKeys() {
			if k == "chat_template" || k == "tokenize" {
				return "", fmt.Errorf("chat request: chat_template_kwargs: %q is not allowed: %w", k, ErrBadMessage)
			}
			v, _ := kw.AsDict().Get(k)
			vars[k] = v
		}
		if v, ok := vars["add_generation_prompt"]; ok {
			addGen = v.IsTruthy()
		}
	}
	if req.ContinueFinalMessage && addGen {
		return "", fmt.Errorf("chat request: continue_final_message and add_generation_prompt cannot both be true: %w", ErrBadMessage)
	}
	out, err := c.render(vars)
	if err != nil {
		return "", err
	}
	if req.ContinueFinalMessage {
		return continueFinal(out, msgs)
	}
	return out, nil
}

// continueFinal cuts the rendered chat after the last message's text, as
// transformers does for continue_final_message, so that the model goes on
// with that message instead of starting a new one.
func continueFinal(out string, msgs jinja.Value) (string, error) {
	items := msgs.AsList().Items
	if len(items) == 0 {
		return "", fmt.Errorf("chat request: continue_final_message with no messages: %w", ErrBadMessage)
	}
	content, _ := items[len(items)-1].AsDict().Get("content")
	final, found := "", false
	switch {
	case content.IsString():
		final, found = content.AsString(), true
	case content.IsList():
		for i := content.AsList().Len() - 1; i >= 0 && !found; i-- {
			if p := content.AsList().Get(i); p.IsDict() {
				if t, ok := p.AsDict().Get("text"); ok && t.IsString() {
					final, found = t.AsString(), true
				}
			}
		}
	}
	stripped := pyStrip(final)
	if !found || !strings.Contains(out, stripped) {
		return "", fmt.Errorf("chat request: continue_final_message: the final message does not appear in the rendered chat: %w", ErrBadMessage)
	}
	loc := strings.LastIndex(out, stripped)
	left := strings.TrimLeftFunc(final, isPySpace)
	if loc+len(left) <= len(out) && out[loc:loc+len(left)] == final {
		return out[:loc+len(left)], nil
	}
	return out[:loc+len(stripped)], nil
}

func isPySpace(r rune) bool { return pyStrip(string(r)) == "" }

// Render implements Template, so that a Jinja template can stand where the
// built-in formats do; messages carry string content only.
func (c *ChatTemplate) Render(msgs []Message, addGenerationPrompt bool) (string, error) {
	raw, err := json.Marshal(msgs)
	if err != nil {
		return "", err
	}
	return c.Apply(&ChatRequest{Messages: raw, AddGenerationPrompt: &addGenerationPrompt}, nil)
}

var _ Template = (*ChatTemplate)(nil)
