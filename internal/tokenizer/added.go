// This file holds the added tokens: their ids, and their Aho-Corasick matcher that cuts them out.

package tokenizer

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedTokenJSON is one entry of "added_tokens".
type addedTokenJSON struct {
	ID         uint32 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	Lstrip     bool   `json:"lstrip"`
	Rstrip     bool   `json:"rstrip"`
	Normalized *bool  `json:"normalized"`
	Special    bool   `json:"special"`
}

type addedToken struct {
	id         uint32
	content    string
	singleWord bool
	lstrip     bool
	rstrip     bool
	normalized bool
	special    bool
}

// addedVocab holds the added tokens: cut out of the text before the model
// sees it, those with normalized=false from the raw text and the others
// from the normalized text.
type addedVocab struct {
	byContent map[string]uint32
	byID      map[uint32]*addedToken
	maxID     uint32 // largest id in byContent
	raw, norm *matcher
}

// newAddedVocab registers the tokens in file order and gives them ids the
// way tokenizers does when it loads a file: the id of the same content in
// the model vocabulary if any, else the next free id. Files written by
// tokenizers carry those same ids; the "id" field is not trusted over them.
func newAddedVocab(list []addedTokenJSON, model *bpe, norm normalizer) *addedVocab {
	v := &addedVocab{byContent: make(map[string]uint32), byID: make(map[uint32]*addedToken)}
	var order []*addedToken
	for _, j := range list {
		if j.Content == "" {
			continue
		}
		t := &addedToken{
			content:    j.Content,
			singleWord: j.SingleWord,
			lstrip:     j.Lstrip,
			rstrip:     j.Rstrip,
			normalized: !j.Special,
			special:    j.Special,
		}
		if j.Normalized != nil {
			t.normalized = *j.Normalized
		}
		id, ok := v.byContent[t.content]
		if ok {
			if t.id = id; *v.byID[id] == *t {
				continue // an exact repeat
			}
		} else {
			if id, ok = model.vocab[t.content]; !ok {
				id = v.nextID(len(model.vocab))
			}
		}
		t.id = id
		v.byContent[t.content] = id
		v.maxID = max(v.maxID, id)
		if old := v.byID[id]; old != nil {
			order = slices.DeleteFunc(order, func(o *addedToken) bool { return o == old })
		}
		v.byID[id] = t
		order = append(order, t)
	}
	var raw, normalized []*addedToken
	var patterns []string
	for _, t := range order {
		if t.normalized {
			normalized = append(normalized, t)
			p := t.content
			if norm != nil {
				p = norm.normalize(p)
			}
			patterns = append(patterns, p)
		} else {
			raw = append(raw, t)
		}
	}
	rawPatterns := make([]string, len(raw))
	for i, t := range raw {
		rawPatterns[i] = t.content
	}
	v.raw = newMatcher(raw, rawPatterns)
	v.norm = newMatcher(normalized, patterns)
	return v
}

// nextID is tokenizers' choice of id for an added token unknown to the
// model: the model's vocabulary size, or one past the largest added id
// once that reaches the vocabulary size.
func (v *addedVocab) nextID(vocabSize int) uint32 {
	if len(v.byContent) == 0 {
		return uint32(vocabSize)
	}
	if int64(v.maxID) >= int64(vocabSize) || vocabSize == 0 {
		return v.maxID + 1
	}
	return uint32(vocabSize)
}

// matcher finds added tokens in text with Aho-Corasick's leftmost-longest
// semantics: the earliest match, the longest among those starting there.
// A byte trie is enough for the few hundred tokens a tokenizer adds.
type matcher struct {
	tokens []*addedToken
	nodes  []trieNode
	first  [256]bool // bytes that start some pattern
	only   int       // the single first byte when there is one, else -1
}

type trieNode struct {
	edges []trieEdge
	token int32 // index into tokens of the pattern ending here, or -1
}

type trieEdge struct {
	b    byte
	next int32
}

func newMatcher(tokens []*addedToken, patterns []string) *matcher {
	m := &matcher{tokens: tokens, nodes: []trieNode{{token: -1}}, only: -1}
	firsts := 0
	for k, p := range patterns {
		if p == "" {
			continue
		}
		if !m.first[p[0]] {
			m.first[p[0]] = true
			firsts++
			m.only = int(p[0])
		}
		n := int32(0)
		for i := 0; i < len(p); i++ {
			n = m.child(n, p[i])
		}
		if m.nodes[n].token < 0 {
			m.nodes[n].token = int32(k)
		}
	}
	if firsts != 1 {
		m.only = -1
	}
	return m
}

func (m *matcher) child(n int32, b byte) int32 {
	for _, e := range m.nodes[n].edges {
		if e.b == b {
			return e.next
		}
	}
	m.nodes = append(m.nodes, trieNode{token: -1})
	next := int32(len(m.nodes) - 1)
	m.nodes[n].edges = append(m.nodes[n].edges, trieEdge{b: b, next: next})
	return next
}

// longest returns the end and token of the longest pattern at s[i:].
func (m *matcher) longest(s string, i int) (int, *addedToken) {
	end, tok := -1, int32(-1)
	n := int32(0)
	for j := i; j < len(s); j++ {
		next := int32(-1)
		for _, e := range m.nodes[n].edges {
			if e.b == s[j] {
				next = e.next
				break
			}
		}
		if next < 0 {
			break
		}
		n = next
		if t := m.nodes[n].token; t >= 0 {
			end, tok = j+1, t
		}
	}
	if tok < 0 {
		return -1, nil
	}
	return end, m.tokens[tok]
}

// nextCandidate returns the first position at or after i where a pattern
// may start, or -1.
func (m *matcher) nextCandidate(s string, i int) int {
	if m.only >= 0 {
		if k := strings.IndexByte(s[i:], byte(m.only)); k >= 0 {
			return i + k
		}
		return -1
	}
	for ; i < len(s); i++ {
		if m.first[s[i]] {
			return i
		}
	}
	return -1
}

// each calls fn, in order, for the segments of s: added tokens (with their
// token) and the text between them (with nil). The segments cover s.
func (m *matcher) each(s string, fn func(text string, tok *addedToken)) {
	if len(m.tokens) == 0 {
		if s != "" {
			fn(s, nil)
		}
		return
	}
	done := 0
	for i := 0; i < len(s); {
		if i = m.nextCandidate(s, i); i < 0 {
			break
		}
		end, t := m.longest(s, i)
		if t == nil {
			i++
			continue
		}
		start, stop := i, end
		i = end
		if t.singleWord && (start > 0 && endsWithWord(s[:start]) || stop < len(s) && startsWithWord(s[stop:])) {
			continue
		}
		if t.lstrip {
			// Whitespace already taken by the previous token stays there.
			start = max(len(strings.TrimRightFunc(s[:start], unicode.IsSpace)), done)
		}
		if t.rstrip {
			stop = len(s) - len(strings.TrimLeftFunc(s[stop:], unicode.IsSpace))
			i = stop
		}
		if done < start {
			fn(s[done:start], nil)
		}
		fn(s[start:stop], t)
		done = stop
	}
	if done < len(s) {
		fn(s[done:], nil)
	}
}

// isWord is the \w of Rust's regex crate, which tokenizers uses to decide
// single_word matches.
func isWord(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Nl, r) ||
		unicode.Is(unicode.Pc, r) || r == 0x200C || r == 0x200D
}

func endsWithWord(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return isWord(r)
}

func startsWithWord(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return isWord(r)
}
