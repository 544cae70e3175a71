// This file holds the chat request as a template gets it: messages and tools, preprocessed as vLLM does.

package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ardanlabs/jinja"
)

// ChatRequest is the part of an OpenAI chat completion request that
// decides the prompt. Messages, Tools, Documents and ChatTemplateKwargs
// stay raw JSON so that their key order, which tojson prints, is kept.
type ChatRequest struct {
	Messages             json.RawMessage `json:"messages"`
	Tools                json.RawMessage `json:"tools,omitempty"`
	Documents            json.RawMessage `json:"documents,omitempty"`
	ChatTemplateKwargs   json.RawMessage `json:"chat_template_kwargs,omitempty"`
	AddGenerationPrompt  *bool           `json:"add_generation_prompt,omitempty"`
	ContinueFinalMessage bool            `json:"continue_final_message,omitempty"`
	ReasoningEffort      *string         `json:"reasoning_effort,omitempty"`
}

// ParseChatRequest reads an OpenAI chat completion request body; fields
// that do not shape the prompt (model, sampling) are ignored.
func ParseChatRequest(body []byte) (*ChatRequest, error) {
	var r ChatRequest
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("chat request: %w: %w", ErrBadMessage, err)
	}
	if isNull(r.Messages) {
		return nil, fmt.Errorf("chat request: messages: missing: %w", ErrBadMessage)
	}
	return &r, nil
}

// decodeOrdered decodes JSON into template values, keeping object key
// order (Python dicts keep it, and tojson shows it).
func decodeOrdered(data []byte) (jinja.Value, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	v, err := decodeValue(d, 0)
	if err != nil {
		return jinja.Undefined(), err
	}
	if _, err := d.Token(); err == nil {
		return jinja.Undefined(), fmt.Errorf("trailing data after the JSON value")
	}
	return v, nil
}

const maxJSONDepth = 200

func decodeValue(d *json.Decoder, depth int) (jinja.Value, error) {
	if depth > maxJSONDepth {
		return jinja.Undefined(), fmt.Errorf("JSON nested deeper than %d", maxJSONDepth)
	}
	tok, err := d.Token()
	if err != nil {
		return jinja.Undefined(), err
	}
	switch t := tok.(type) {
	case json.Delim:
		if t == '{' {
			v := jinja.NewDict()
			for d.More() {
				k, err := d.Token()
				if err != nil {
					return jinja.Undefined(), err
				}
				e, err := decodeValue(d, depth+1)
				if err != nil {
					return jinja.Undefined(), err
				}
				v.AsDict().Set(k.(string), e)
			}
			_, err := d.Token()
			return v, err
		}
		items := []jinja.Value{}
		for d.More() {
			e, err := decodeValue(d, depth+1)
			if err != nil {
				return jinja.Undefined(), err
			}
			items = append(items, e)
		}
		_, err := d.Token()
		return jinja.NewList(items), err
	case string:
		return jinja.NewString(t), nil
	case json.Number:
		return jinja.FromGoValue(t), nil
	case bool:
		return jinja.NewBool(t), nil
	case nil:
		return jinja.None(), nil
	}
	return jinja.Undefined(), fmt.Errorf("unexpected JSON token %v", tok)
}

func field(d *jinja.Dict, k string) (jinja.Value, bool) {
	v, ok := d.Get(k)
	return v, ok
}

// textPartTypes are the content parts vLLM turns into text, with the
// field that holds it.
var textPartTypes = map[string]string{"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal", "thinking": "thinking"}

// conversation turns the request's messages into what vLLM hands the
// template (vllm/entrypoints/chat_utils.py): content as a string (text
// parts joined by "\n") or, for templates that loop over content, as a list
// of text parts; role, content, then tool_calls and reasoning for the
// assistant, tool_call_id for tools, name; other fields dropped; tool call
// arguments parsed from their JSON string.
func conversation(raw json.RawMessage, openai bool) (jinja.Value, error) {
	v, err := decodeOrdered(raw)
	if err != nil || !v.IsList() {
		return jinja.Undefined(), fmt.Errorf("messages: want a list of messages: %w", ErrBadMessage)
	}
	out := make([]jinja.Value, 0, v.AsList().Len())
	for i, m := range v.AsList().Items {
		if !m.IsDict() {
			return jinja.Undefined(), fmt.Errorf("messages[%d]: want an object: %w", i, ErrBadMessage)
		}
		msg, err := convertMessage(m.AsDict(), openai)
		if err != nil {
			return jinja.Undefined(), fmt.Errorf("messages[%d].%w", i, err)
		}
		out = append(out, msg)
	}
	return jinja.NewList(out), nil
}

func convertMessage(m *jinja.Dict, openai bool) (jinja.Value, error) {
	role, ok := field(m, "role")
	if !ok || !role.IsString() {
		return jinja.Undefined(), fmt.Errorf("role: want a string: %w", ErrBadMessage)
	}
	var texts []string
	content, _ := field(m, "content")
	switch {
	case content.IsUndefined() || content.IsNone():
	case content.IsString():
		texts = []string{content.AsString()}
	case content.IsList():
		for k, p := range content.AsList().Items {
			t, err := partText(p)
			if err != nil {
				return jinja.Undefined(), fmt.Errorf("content[%d]%w", k, err)
			}
			if t != nil {
				texts = append(texts, *t)
			}
		}
	default:
		return jinja.Undefined(), fmt.Errorf("content: want a string, null or a list of parts: %w", ErrBadMessage)
	}
	out := jinja.NewDict()
	d := out.AsDict()
	d.Set("role", role)
	r := role.AsString()
	if openai && r != "tool" {
		parts := make([]jinja.Value, len(texts))
		for k, t := range texts {
			p := jinja.NewDict()
			p.AsDict().Set("type", jinja.NewString("text"))
			p.AsDict().Set("text", jinja.NewString(t))
			parts[k] = p
		}
		d.Set("content", jinja.NewList(parts))
	} else {
		// vLLM also flattens a tool message's text parts for templates
		// that take parts.
		d.Set("content", jinja.NewString(strings.Join(texts, "\n")))
	}
	switch r {
	case "assistant":
		if tc, ok := field(m, "tool_calls"); ok && !tc.IsNone() {
			calls, err := toolCalls(tc)
			if err != nil {
				return jinja.Undefined(), err
			}
			if calls.AsList().Len() > 0 {
				d.Set("tool_calls", calls)
			}
		}
		if rs, ok := field(m, "reasoning"); ok && !rs.IsNone() {
			d.Set("reasoning", rs)
			d.Set("reasoning_content", rs)
		}
	case "tool":
		if id, ok := field(m, "tool_call_id"); ok {
			d.Set("tool_call_id", id)
		}
	}
	for _, k := range []string{"name", "task"} {
		if v, ok := field(m, k); ok && v.IsString() {
			d.Set(k, v)
		}
	}
	if r == "developer" {
		tools, ok := field(m, "tools")
		if !ok {
			tools = jinja.None()
		}
		d.Set("tools", tools)
	}
	return out, nil
}

// partText returns the text of a content part, nil for a text part
// without text (vLLM skips those), or an error for media, which the router
// cannot place as the engine's processor would.
func partText(p jinja.Value) (*string, error) {
	if p.IsString() {
		s := p.AsString()
		return &s, nil
	}
	if !p.IsDict() {
		return nil, fmt.Errorf(": want a string or an object: %w", ErrBadMessage)
	}
	typ, _ := field(p.AsDict(), "type")
	if !typ.IsString() {
		return nil, fmt.Errorf(".type: missing: %w", ErrUnsupportedContent)
	}
	key, ok := textPartTypes[typ.AsString()]
	if !ok {
		return nil, fmt.Errorf(".type %q (only text parts): %w", typ.AsString(), ErrUnsupportedContent)
	}
	t, _ := field(p.AsDict(), key)
	if t.IsUndefined() || t.IsNone() {
		return nil, nil
	}
	if !t.IsString() {
		return nil, fmt.Errorf(".%s: want a string: %w", key, ErrBadMessage)
	}
	s := t.AsString()
	return &s, nil
}

// toolCalls parses each call's function.arguments from its JSON string,
// as vLLM does for templates that expect a mapping; an argument string
// that is not JSON becomes {}.
func toolCalls(tc jinja.Value) (jinja.Value, error) {
	if !tc.IsList() {
		return jinja.Undefined(), fmt.Errorf("tool_calls: want a list: %w", ErrBadMessage)
	}
	for k, c := range tc.AsList().Items {
		fn, ok := jinja.Value{}, false
		if c.IsDict() {
			fn, ok = field(c.AsDict(), "function")
		}
		if !ok || !fn.IsDict() {
			return jinja.Undefined(), fmt.Errorf("tool_calls[%d].function: want an object: %w", k, ErrBadMessage)
		}
		args, _ := field(fn.AsDict(), "arguments")
		switch {
		case args.IsString():
			parsed, err := decodeOrdered([]byte(args.AsString()))
			if err != nil {
				parsed = jinja.NewDict()
			}
			fn.AsDict().Set("arguments", parsed)
		case args.IsDict() || args.IsList():
		default:
			fn.AsDict().Set("arguments", jinja.NewDict())
		}
	}
	return tc, nil
}

// toolSchemas gives each tool the shape of vLLM's ChatCompletionToolsParam
// after model_dump: type, then function with name, description and
// parameters (null when absent) first, other fields kept after.
func toolSchemas(raw json.RawMessage) (jinja.Value, error) {
	if isNull(raw) {
		return jinja.None(), nil
	}
	v, err := decodeOrdered(raw)
	if err != nil || !v.IsList() {
		return jinja.Undefined(), fmt.Errorf("tools: want a list: %w", ErrBadMessage)
	}
	out := make([]jinja.Value, 0, v.AsList().Len())
	for i, t := range v.AsList().Items {
		if !t.IsDict() {
			return jinja.Undefined(), fmt.Errorf("tools[%d]: want an object: %w", i, ErrBadMessage)
		}
		fn, ok := field(t.AsDict(), "function")
		if !ok || !fn.IsDict() {
			return jinja.Undefined(), fmt.Errorf("tools[%d].function: want an object: %w", i, ErrBadMessage)
		}
		if name, _ := field(fn.AsDict(), "name"); !name.IsString() {
			return jinja.Undefined(), fmt.Errorf("tools[%d].function.name: want a string: %w", i, ErrBadMessage)
		}
		fd := reorder(fn.AsDict(), nil, "name", "description", "parameters")
		out = append(out, reorder(t.AsDict(), map[string]jinja.Value{"type": jinja.NewString("function"), "function": fd}, "type", "function"))
	}
	return jinja.NewList(out), nil
}

// reorder returns d with the keys first in the given order, then d's
// other keys in their order. A key in set takes that value; a missing
// key is null.
func reorder(d *jinja.Dict, set map[string]jinja.Value, first ...string) jinja.Value {
	out := jinja.NewDict()
	for _, k := range first {
		v, ok := set[k]
		if !ok {
			if v, ok = d.Get(k); !ok {
				v = jinja.None()
			}
		}
		out.AsDict().Set(k, v)
	}
	for _, k := range d.OrderedKeys() {
		if !out.AsDict().Has(k) {
			v, _ := d.Get(k)
			out.AsDict().Set(k, v)
		}
	}
	return out
}
