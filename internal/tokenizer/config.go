// This file holds tokenizer_config.json: special tokens, add_bos_token/add_eos_token, chat templates.

package tokenizer

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Config is what a tokenizer_config.json says about tokenization and chat,
// as transformers reads it.
type Config struct {
	// TokenizerClass is tokenizer_class, such as "LlamaTokenizerFast".
	TokenizerClass string
	// AddBOS and AddEOS are add_bos_token and add_eos_token (nil when
	// absent).
	AddBOS, AddEOS *bool
	// SpecialTokens maps bos_token, eos_token, unk_token, sep_token,
	// pad_token, cls_token and mask_token to their text, with the defaults
	// of the tokenizer class for those the file leaves out; a token the
	// file sets to null is absent.
	SpecialTokens map[string]string
	// AdditionalSpecialTokens is additional_special_tokens.
	AdditionalSpecialTokens []string
	// ChatTemplates holds chat_template: the one template under "default",
	// or every named template of the list form.
	ChatTemplates map[string]string
}

var specialTokenKeys = []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}

// classDefaults are the special tokens the slow and fast tokenizer classes
// default to when tokenizer_config.json omits them.
var classDefaults = map[string]map[string]string{
	"LlamaTokenizer":     {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
	"CodeLlamaTokenizer": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
	"GemmaTokenizer":     {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>"},
	"Qwen2Tokenizer":     {"eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>", "pad_token": "<|endoftext|>"},
}

// bosClasses rebuild their post-processor from add_bos_token and
// add_eos_token when they load (transformers' update_post_processor), so
// for them those switches, not tokenizer.json, decide the special tokens
// of a plain prompt.
var bosClasses = []string{"LlamaTokenizer", "CodeLlamaTokenizer", "GemmaTokenizer"}

func baseClass(name string) string {
	if n := len(name) - len("Fast"); n > 0 && name[n:] == "Fast" {
		return name[:n]
	}
	return name
}

// ParseConfig reads a tokenizer_config.json.
func ParseConfig(data []byte) (*Config, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("tokenizer_config.json: %w: %w", ErrInvalid, err)
	}
	c := &Config{SpecialTokens: map[string]string{}, ChatTemplates: map[string]string{}}
	if r, ok := raw["tokenizer_class"]; ok && !isNull(r) {
		if err := json.Unmarshal(r, &c.TokenizerClass); err != nil {
			return nil, configInvalid("tokenizer_class", "want a string")
		}
	}
	for _, k := range []string{"add_bos_token", "add_eos_token"} {
		r, ok := raw[k]
		if !ok || isNull(r) {
			continue
		}
		var b bool
		if err := json.Unmarshal(r, &b); err != nil {
			return nil, configInvalid(k, "want true or false")
		}
		if k == "add_bos_token" {
			c.AddBOS = &b
		} else {
			c.AddEOS = &b
		}
	}
	for k, v := range classDefaults[baseClass(c.TokenizerClass)] {
		c.SpecialTokens[k] = v
	}
	for _, k := range specialTokenKeys {
		r, ok := raw[k]
		if !ok {
			continue
		}
		if isNull(r) {
			delete(c.SpecialTokens, k)
			continue
		}
		s, err := tokenContent(r)
		if err != nil {
			return nil, configInvalid(k, "%v", err)
		}
		c.SpecialTokens[k] = s
	}
	if r, ok := raw["additional_special_tokens"]; ok && !isNull(r) {
		var list []json.RawMessage
		if err := json.Unmarshal(r, &list); err != nil {
			return nil, configInvalid("additional_special_tokens", "want a list")
		}
		for i, e := range list {
			s, err := tokenContent(e)
			if err != nil {
				return nil, configInvalid(fmt.Sprintf("additional_special_tokens[%d]", i), "%v", err)
			}
			c.AdditionalSpecialTokens = append(c.AdditionalSpecialTokens, s)
		}
	}
	if r, ok := raw["chat_template"]; ok && !isNull(r) {
		var s string
		if json.Unmarshal(r, &s) == nil {
			c.ChatTemplates["default"] = s
		} else {
			var named []struct {
				Name     string `json:"name"`
				Template string `json:"template"`
			}
			if err := json.Unmarshal(r, &named); err != nil {
				return nil, configInvalid("chat_template", "want a string or a list of {name, template}")
			}
			for _, n := range named {
				c.ChatTemplates[n.Name] = n.Template
			}
		}
	}
	return c, nil
}

func configInvalid(field, format string, args ...any) error {
	return fmt.Errorf("tokenizer_config.json: %s: %s: %w", field, fmt.Sprintf(format, args...), ErrInvalid)
}

// tokenContent reads a special token: a string, or an AddedToken object
// with its content.
func tokenContent(r json.RawMessage) (string, error) {
	var s string
	if json.Unmarshal(r, &s) == nil {
		return s, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(r, &obj); err != nil || obj.Content == nil {
		return "", fmt.Errorf("want a string or an object with content")
	}
	return *obj.Content, nil
}

// templateVars returns the special tokens as chat templates see them
// (transformers passes special_tokens_map to the template).
func (c *Config) templateVars() map[string]any {
	vars := map[string]any{}
	if c == nil {
		return vars
	}
	for k, v := range c.SpecialTokens {
		vars[k] = v
	}
	if len(c.AdditionalSpecialTokens) > 0 {
		vars["additional_special_tokens"] = slices.Clone(c.AdditionalSpecialTokens)
	}
	return vars
}

// postProcessorFor returns the post-processor that transformers' class
// builds from add_bos_token and add_eos_token, or ok=false when the class
// keeps tokenizer.json's.
func (c *Config) postProcessorFor(t *Tokenizer) (p *postProcessor, ok bool, err error) {
	if c == nil || !slices.Contains(bosClasses, baseClass(c.TokenizerClass)) {
		return nil, false, nil
	}
	addBOS, addEOS := true, false
	if c.AddBOS != nil {
		addBOS = *c.AddBOS
	}
	if c.AddEOS != nil {
		addEOS = *c.AddEOS
	}
	p = &postProcessor{}
	for _, sw := range []struct {
		on   bool
		key  string
		dst  *[]uint32
		flag string
	}{{addBOS, "bos_token", &p.before, "add_bos_token"}, {addEOS, "eos_token", &p.after, "add_eos_token"}} {
		if !sw.on {
			continue
		}
		tok, ok := c.SpecialTokens[sw.key]
		if !ok {
			return nil, false, configInvalid(sw.flag, "true, but %s is null", sw.key)
		}
		id, ok := t.TokenID(tok)
		if !ok {
			return nil, false, configInvalid(sw.key, "%q is not in the tokenizer's vocabulary", tok)
		}
		*sw.dst = append(*sw.dst, id)
	}
	return p, true, nil
}
