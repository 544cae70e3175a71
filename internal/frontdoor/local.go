// This file holds the in-process tokenizer: a model's tokenizer files and
// chat template, loaded and applied as `kvrouter serve` and `kvrouter
// tokenize` both do.

package frontdoor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"kvrouter/internal/tokenizer"
)

// Tokenizer flag values besides a path.
const (
	// TokenizerEngine asks a worker's POST /tokenize.
	TokenizerEngine = "engine"
	// TokenizerDemo is the embedded demo tokenizer of the simulated fleet.
	TokenizerDemo = "demo"
)

// Local tokenizes in process with a model's tokenizer and chat template,
// as its engines do.
type Local struct {
	Model *tokenizer.Model
}

// LoadLocal loads the tokenizer that --tokenizer names (a tokenizer.json,
// a model directory, or TokenizerDemo), with --tokenizer-config (the
// tokenizer_config.json to use) and --chat-template (a Jinja file
// overriding the model's template, as the engines' --chat-template, or
// the name of a built-in format). `kvrouter serve` and `kvrouter tokenize`
// both load theirs here, so that the second shows what the first routes on.
func LoadLocal(path, config, chatTemplate string) (*Local, error) {
	var m *tokenizer.Model
	switch path {
	case "":
		return nil, errors.New("--tokenizer: give a tokenizer.json, a model directory or " + TokenizerDemo)
	case TokenizerEngine:
		return nil, fmt.Errorf("--tokenizer %s is not a local tokenizer", TokenizerEngine)
	case TokenizerDemo:
		if config != "" {
			return nil, fmt.Errorf("--tokenizer-config applies to a model's tokenizer files, not to --tokenizer %s", TokenizerDemo)
		}
		m = tokenizer.Demo()
	default:
		var err error
		if m, err = tokenizer.LoadModel(path, config); err != nil {
			return nil, fmt.Errorf("--tokenizer %s: %w", path, err)
		}
	}
	if chatTemplate != "" {
		t, err := tokenizer.LoadChatTemplate(chatTemplate)
		if err != nil {
			return nil, fmt.Errorf("--chat-template %s: %w", chatTemplate, err)
		}
		c := *m // Demo's model is shared
		c.SetChatTemplate(t)
		m = &c
	}
	return &Local{Model: m}, nil
}

func (l *Local) Tokenize(_ context.Context, req *Request) ([]uint32, error) {
	if req.HasTokens {
		return req.Tokens, nil
	}
	add, err := boolean(req.top[keyAddSpecialTokens], keyAddSpecialTokens, req.Kind == KindCompletion)
	if err != nil {
		return nil, err
	}
	// A prompt too long for the model's context by its bytes alone is
	// refused before any work is spent encoding it.
	fits := func(text string) error {
		return checkContextBytes(req.Model, text, req.context, l.Model.Tok.MaxBytesPerToken())
	}
	if req.Kind == KindCompletion {
		if err := fits(req.Prompt); err != nil {
			return nil, err
		}
		return l.Text(req.Prompt, add), nil
	}
	if req.Messages == nil {
		return nil, nil // content the router cannot render (images)
	}
	cr, err := chatRequestOf(req.top, req.RawMessages, req.AddGenerationPrompt)
	if err != nil {
		return nil, err
	}
	// The rendered text, not the messages: a template may trim them.
	_, ids, err := l.chat(cr, add, fits)
	return ids, err
}

// Text tokenizes a completion prompt; addSpecial adds the tokenizer's
// special tokens (a BOS for most models), which engines do unless the
// request's add_special_tokens is false.
func (l *Local) Text(text string, addSpecial bool) []uint32 {
	return l.Model.EncodeText(text, addSpecial)
}

// Chat renders a chat request with the model's template and tokenizes it.
// addSpecial is the request's add_special_tokens (default false for chats:
// the template carries the special tokens).
func (l *Local) Chat(cr *tokenizer.ChatRequest, addSpecial bool) (string, []uint32, error) {
	return l.chat(cr, addSpecial, nil)
}

// chat is Chat with a check of the rendered text before it is encoded.
func (l *Local) chat(cr *tokenizer.ChatRequest, addSpecial bool, check func(string) error) (string, []uint32, error) {
	// Model.EncodeChat, with the request's add_special_tokens and the
	// check between rendering and encoding.
	text, err := l.Model.RenderChat(cr)
	switch {
	case errors.Is(err, tokenizer.ErrBadMessage):
		return "", nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	case err != nil:
		// A template that raises, or none: the engine says what it says
		// about the request, which is routed on load alone meanwhile.
		return "", nil, err
	}
	if check != nil {
		if err := check(text); err != nil {
			return "", nil, err
		}
	}
	return text, l.Model.EncodeText(text, addSpecial), nil
}

// Members of a chat request that shape its prompt besides messages.
const (
	keyAddSpecialTokens   = "add_special_tokens"
	keyTools              = "tools"
	keyDocuments          = "documents"
	keyChatTemplateKwargs = "chat_template_kwargs"
	keyContinueFinal      = "continue_final_message"
	keyReasoningEffort    = "reasoning_effort"
)

// chatRequestOf gathers from a chat body's members what its template sees.
func chatRequestOf(top map[string]json.RawMessage, messages json.RawMessage, addGenerationPrompt bool) (*tokenizer.ChatRequest, error) {
	cr := &tokenizer.ChatRequest{Messages: messages, Tools: top[keyTools], Documents: top[keyDocuments],
		ChatTemplateKwargs: top[keyChatTemplateKwargs], AddGenerationPrompt: &addGenerationPrompt}
	var err error
	if cr.ContinueFinalMessage, err = boolean(top[keyContinueFinal], keyContinueFinal, false); err != nil {
		return nil, err
	}
	if raw := top[keyReasoningEffort]; len(raw) > 0 && !isNull(raw) {
		s, err := str(raw, keyReasoningEffort, false)
		if err != nil {
			return nil, err
		}
		cr.ReasoningEffort = &s
	}
	return cr, nil
}

// ParseChat reads an OpenAI chat completion body as the front door does,
// for `kvrouter tokenize --chat`: the request its template sees and its
// add_special_tokens. The model member may be absent.
func ParseChat(body []byte) (*tokenizer.ChatRequest, bool, error) {
	if !json.Valid(body) {
		return nil, false, fmt.Errorf("%w: body is not valid JSON", ErrBadRequest)
	}
	top, ok := members(body)
	if !ok {
		return nil, false, fmt.Errorf("%w: body is not a JSON object", ErrBadRequest)
	}
	if raw := top[keyMessages]; len(raw) == 0 || isNull(raw) {
		return nil, false, fmt.Errorf("%w: messages is required", ErrBadRequest)
	}
	addGen, err := boolean(top[keyAddGenPrompt], keyAddGenPrompt, true)
	if err != nil {
		return nil, false, err
	}
	add, err := boolean(top[keyAddSpecialTokens], keyAddSpecialTokens, false)
	if err != nil {
		return nil, false, err
	}
	cr, err := chatRequestOf(top, top[keyMessages], addGen)
	return cr, add, err
}
