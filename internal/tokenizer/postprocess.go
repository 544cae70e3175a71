// This file holds the post-processor: the special tokens wrapped around a sequence's ids.

package tokenizer

import (
	"encoding/json"
	"fmt"
)

// postProcessor wraps the ids of a single sequence in special tokens.
type postProcessor struct {
	before, after []uint32
}

func (p *postProcessor) apply(ids []uint32) []uint32 {
	if p == nil || len(p.before)+len(p.after) == 0 {
		return ids
	}
	out := make([]uint32, 0, len(p.before)+len(ids)+len(p.after))
	out = append(out, p.before...)
	out = append(out, ids...)
	return append(out, p.after...)
}

type postProcessorJSON struct {
	Type          string                         `json:"type"`
	Processors    []json.RawMessage              `json:"processors"`
	Single        []templatePieceJSON            `json:"single"`
	SpecialTokens map[string]templateSpecialJSON `json:"special_tokens"`
	Cls           json.RawMessage                `json:"cls"`
	Sep           json.RawMessage                `json:"sep"`
}

type templatePieceJSON struct {
	SpecialToken *struct {
		ID string `json:"id"`
	} `json:"SpecialToken"`
	Sequence *struct {
		ID string `json:"id"`
	} `json:"Sequence"`
}

type templateSpecialJSON struct {
	IDs []uint32 `json:"ids"`
}

// parsePostProcessor returns nil for a processor that adds nothing.
func parsePostProcessor(raw json.RawMessage, field string) (*postProcessor, error) {
	if isNull(raw) {
		return nil, nil
	}
	p := &postProcessor{}
	if err := p.add(raw, field); err != nil {
		return nil, err
	}
	if len(p.before)+len(p.after) == 0 {
		return nil, nil
	}
	return p, nil
}

// add composes the processor in raw after those already in p.
func (p *postProcessor) add(raw json.RawMessage, field string) error {
	var j postProcessorJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return invalid(field, "%v", err)
	}
	switch j.Type {
	case "Sequence":
		for i, r := range j.Processors {
			if err := p.add(r, fmt.Sprintf("%s.processors[%d]", field, i)); err != nil {
				return err
			}
		}
	case "ByteLevel":
		// Only adjusts offsets.
	case "TemplateProcessing":
		var before, after []uint32
		seen := false
		for i, piece := range j.Single {
			f := fmt.Sprintf("%s.single[%d]", field, i)
			switch {
			case piece.Sequence != nil:
				if seen {
					return invalid(f, "a second sequence in a single-sequence template")
				}
				seen = true
			case piece.SpecialToken != nil:
				sp, ok := j.SpecialTokens[piece.SpecialToken.ID]
				if !ok {
					return invalid(f, "special token %q is not in %s.special_tokens", piece.SpecialToken.ID, field)
				}
				if seen {
					after = append(after, sp.IDs...)
				} else {
					before = append(before, sp.IDs...)
				}
			default:
				return invalid(f, "neither SpecialToken nor Sequence")
			}
		}
		if !seen {
			return invalid(field+".single", "no sequence")
		}
		p.before = append(before, p.before...)
		p.after = append(p.after, after...)
	case "RobertaProcessing", "BertProcessing":
		cls, err := tokenPair(j.Cls, field+".cls")
		if err != nil {
			return err
		}
		sep, err := tokenPair(j.Sep, field+".sep")
		if err != nil {
			return err
		}
		p.before = append([]uint32{cls}, p.before...)
		p.after = append(p.after, sep)
	case "":
		return invalid(field+".type", "missing")
	default:
		return unsupported(field+".type", "post-processor %q", j.Type)
	}
	return nil
}

// tokenPair decodes the ["<s>", 0] form of Roberta and Bert processors.
func tokenPair(raw json.RawMessage, field string) (uint32, error) {
	var pair [2]json.RawMessage
	var id uint32
	if err := json.Unmarshal(raw, &pair); err != nil || json.Unmarshal(pair[1], &id) != nil {
		return 0, invalid(field, "want [token, id]")
	}
	return id, nil
}
