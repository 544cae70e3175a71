package tokenizer

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"kvrouter/internal/tokenizer/internal/pretok"
)

func loadFixture(t testing.TB, name string, edits ...string) *Tokenizer {
	t.Helper()
	data, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(edits); i += 2 {
		if !bytes.Contains(data, []byte(edits[i])) {
			t.Fatalf("%s: edit target %q not found", name, edits[i])
		}
		data = bytes.ReplaceAll(data, []byte(edits[i]), []byte(edits[i+1]))
	}
	tok, err := Load(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("loading %s: %v", name, err)
	}
	return tok
}

// TestKnownEncodings checks ids published for GPT-2, Llama 3 and Llama 2,
// reproduced by excerpts of their tokenizer.json files.
func TestKnownEncodings(t *testing.T) {
	tests := []struct {
		fixture    string
		text       string
		addSpecial bool
		want       []uint32
	}{
		{"gpt2-mini.json", "Hello world", true, []uint32{15496, 995}},
		{"gpt2-mini.json", "Hello, world!", false, []uint32{15496, 11, 995, 0}},
		{"gpt2-mini.json", "Hello<|endoftext|>", false, []uint32{15496, 50256}},
		{"gpt2-mini.json", "\n", false, []uint32{198}},
		{"gpt2-mini.json", " ", false, []uint32{220}},
		{"llama3-mini.json", "Hello world", true, []uint32{128000, 9906, 1917}},
		{"llama3-mini.json", "Hello world", false, []uint32{9906, 1917}},
		{"llama3-mini.json", "Hello, world!", true, []uint32{128000, 9906, 11, 1917, 0}},
		{"llama3-mini.json", "", true, []uint32{128000}},
		{"llama2-mini.json", "Hello world", true, []uint32{1, 15043, 3186}},
		{"llama2-mini.json", "😀", true, []uint32{1, 29871, 243, 162, 155, 131}},
		{"llama2-mini.json", "<s>Hello", false, []uint32{1, 15043}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%q", tt.fixture, tt.text), func(t *testing.T) {
			tok := loadFixture(t, tt.fixture)
			if got := tok.Encode(tt.text, tt.addSpecial); !slices.Equal(got, tt.want) {
				t.Errorf("Encode(%q, %v) = %v, want %v", tt.text, tt.addSpecial, got, tt.want)
			}
		})
	}
}

// TestLlama3ChatPrompt is the well-known encoding of a one-turn Llama 3
// chat prompt.
func TestLlama3ChatPrompt(t *testing.T) {
	tok := loadFixture(t, "llama3-mini.json")
	prompt, err := Llama3{}.Render([]Message{{Role: "user", Content: "Hello world"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	want := []uint32{128000, 128006, 882, 128007, 271, 9906, 1917, 128009, 128006, 78191, 128007, 271}
	if got := tok.Encode(prompt, false); !slices.Equal(got, want) {
		t.Errorf("Encode(%q) = %v, want %v", prompt, got, want)
	}
}

func TestModelOptions(t *testing.T) {
	const (
		l = 108 - 33 // GPT-2 byte order: printable ASCII starts at '!' = 0
		o = 111 - 33
	)
	tests := []struct {
		name    string
		fixture string
		edits   []string
		text    string
		want    []uint32
	}{
		{"ignore_merges on", "llama3-mini.json", nil, "Hello", []uint32{9906}},
		{"ignore_merges off", "llama3-mini.json", []string{`"ignore_merges": true`, `"ignore_merges": false`}, "Hello", []uint32{1548, l, l, o}},
		{"fused unknowns", "llama2-mini.json", []string{`"byte_fallback": true`, `"byte_fallback": false`}, "😀😀", []uint32{29871, 0}},
		{"unfused unknowns", "llama2-mini.json", []string{`"byte_fallback": true`, `"byte_fallback": false`, `"fuse_unk": true`, `"fuse_unk": false`}, "😀😀", []uint32{29871, 0, 0}},
		{"byte fallback", "llama2-mini.json", nil, "é", []uint32{29871, 3 + 0xC3, 3 + 0xA9}},
		{"dropped without unk", "llama2-mini.json", []string{`"byte_fallback": true`, `"byte_fallback": false`, `"unk_token": "<unk>"`, `"unk_token": null`}, "😀Hello", []uint32{15043}},
		{"byte-level byte missing", "gpt2-mini.json", []string{`"~": 93,`, ``}, "a~b", []uint32{'a' - 33, 'b' - 33}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok := loadFixture(t, tt.fixture, tt.edits...)
			if got := tok.Encode(tt.text, false); !slices.Equal(got, tt.want) {
				t.Errorf("Encode(%q) = %v, want %v", tt.text, got, tt.want)
			}
		})
	}
}

// byteLevelJSON is a tokenizer.json with the 256 byte tokens (id = byte
// value), no merges, the GPT-2 ByteLevel pre-tokenizer, and the given
// added_tokens and normalizer.
func byteLevelJSON(t testing.TB, addedTokens, normalizer string) string {
	t.Helper()
	var vocab strings.Builder
	for b := range 256 {
		if b > 0 {
			vocab.WriteString(",")
		}
		fmt.Fprintf(&vocab, "%q:%d", string(pretok.ByteRune(byte(b))), b)
	}
	return fmt.Sprintf(`{"added_tokens":%s,"normalizer":%s,"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},
		"decoder":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{%s},"merges":[]}}`, addedTokens, normalizer, vocab.String())
}

func bytesOf(s string) []uint32 {
	ids := make([]uint32, len(s))
	for i := range len(s) {
		ids[i] = uint32(s[i])
	}
	return ids
}

func TestAddedTokens(t *testing.T) {
	const mask = `{"id":256,"content":"<mask>","special":true,"normalized":false%s}`
	tests := []struct {
		name       string
		added      string
		normalizer string
		text       string
		want       []uint32
	}{
		{"plain", `[` + fmt.Sprintf(mask, "") + `]`, "null", "a <mask>b", append(bytesOf("a "), 256, 'b')},
		{"lstrip", `[` + fmt.Sprintf(mask, `,"lstrip":true`) + `]`, "null", "a  <mask>b", append(bytesOf("a"), 256, 'b')},
		{"rstrip", `[` + fmt.Sprintf(mask, `,"rstrip":true`) + `]`, "null", "a <mask> \n b", append(bytesOf("a "), 256, 'b')},
		{"both strips share the space", `[` + fmt.Sprintf(mask, `,"lstrip":true,"rstrip":true`) + `]`, "null", "<mask> <mask>", []uint32{256, 256}},
		{"longest wins", `[{"content":"<m","special":true},{"content":"<mask>","special":true}]`, "null", "<mask><m", []uint32{257, 256}},
		{"single_word", `[{"content":"ing","single_word":true}]`, "null", "tokenizing ing", append(bytesOf("tokenizing "), 256)},
		{"single_word rejects inside a word", `[{"content":"ing","single_word":true}]`, "null", "ings", bytesOf("ings")},
		{"normalized token matches normalized text", `[{"content":"yesterday","normalized":true}]`, `{"type":"Lowercase"}`, "I read Yesterday", append(bytesOf("i read "), 256)},
		{"raw token matches before normalization", `[{"content":"<MASK>","special":true,"normalized":false}]`, `{"type":"Lowercase"}`, "X<MASK>", append(bytesOf("x"), 256)},
		{"raw token does not match normalized text", `[{"content":"<MASK>","special":true,"normalized":false}]`, `{"type":"Lowercase"}`, "<mask>", bytesOf("<mask>")},
		{"partial marker", `[` + fmt.Sprintf(mask, "") + `]`, "null", "<mas", bytesOf("<mas")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := Load(strings.NewReader(byteLevelJSON(t, tt.added, tt.normalizer)))
			if err != nil {
				t.Fatal(err)
			}
			if got := tok.Encode(tt.text, false); !slices.Equal(got, tt.want) {
				t.Errorf("Encode(%q) = %v, want %v", tt.text, got, tt.want)
			}
		})
	}
}

// TestAddedTokenIDs checks that ids are assigned as tokenizers assigns
// them on load, whatever the file says.
func TestAddedTokenIDs(t *testing.T) {
	added := `[{"id":999,"content":"<x>","special":true},{"id":5,"content":"a","special":true},{"id":7,"content":"<y>"}]`
	tok, err := Load(strings.NewReader(byteLevelJSON(t, added, "null")))
	if err != nil {
		t.Fatal(err)
	}
	for content, want := range map[string]uint32{"<x>": 256, "a": 'a', "<y>": 257} {
		if got, ok := tok.TokenID(content); !ok || got != want {
			t.Errorf("TokenID(%q) = %d, %v, want %d", content, got, ok, want)
		}
	}
	if got := tok.VocabSize(); got != 258 {
		t.Errorf("VocabSize() = %d, want 258", got)
	}
	if s, ok := tok.Token(257); !ok || s != "<y>" {
		t.Errorf("Token(257) = %q, %v", s, ok)
	}
}

func TestLoadErrors(t *testing.T) {
	base := map[string]string{
		"version":        `"1.0"`,
		"added_tokens":   `[]`,
		"normalizer":     `null`,
		"pre_tokenizer":  `{"type":"ByteLevel"}`,
		"post_processor": `null`,
		"decoder":        `{"type":"ByteLevel"}`,
		"model":          `{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]}`,
	}
	build := func(field, value string) string {
		var parts []string
		for k, v := range base {
			if k == field {
				v = value
			}
			if v != "" {
				parts = append(parts, fmt.Sprintf("%q:%s", k, v))
			}
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
	if _, err := Load(strings.NewReader(build("", ""))); err != nil {
		t.Fatalf("base tokenizer: %v", err)
	}
	tests := []struct {
		field, value string
		want         error
		mention      string
	}{
		{"model", `{"type":"Unigram","vocab":[]}`, ErrInvalid, ""},
		{"model", `{"type":"WordPiece","vocab":{"a":0}}`, ErrUnsupported, "model.type"},
		{"model", ``, ErrInvalid, "model"},
		{"model", `{"type":"BPE","vocab":{"a":0,"b":1},"merges":["a b"]}`, ErrInvalid, "model.merges[0]"},
		{"model", `{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b c"]}`, ErrInvalid, "model.merges[0]"},
		{"model", `{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":[["a"]]}`, ErrInvalid, "model.merges[0]"},
		{"model", `{"type":"BPE","vocab":{"a":0},"merges":[],"unk_token":"<unk>"}`, ErrInvalid, "model.unk_token"},
		{"model", `{"type":"BPE","vocab":{"a":0},"merges":[],"dropout":0.1}`, ErrUnsupported, "model.dropout"},
		{"model", `{"type":"BPE","vocab":{"a":0},"merges":[],"continuing_subword_prefix":"##"}`, ErrUnsupported, "model.continuing_subword_prefix"},
		{"model", `{"type":"BPE","vocab":{"a":-1},"merges":[]}`, ErrInvalid, ""},
		{"version", `"2.0"`, ErrUnsupported, "version"},
		{"normalizer", `{"type":"Precompiled","precompiled_charsmap":"AA=="}`, ErrUnsupported, "normalizer.type"},
		{"normalizer", `{"type":"Sequence","normalizers":[{"type":"NFC"},{"type":"BertNormalizer"}]}`, ErrUnsupported, "normalizer.normalizers[1].type"},
		{"normalizer", `{"type":"Replace","pattern":{"Regex":" +(?! )"},"content":" "}`, ErrUnsupported, "normalizer.pattern"},
		{"pre_tokenizer", `{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"\\w+(?=x)"},"behavior":"Isolated","invert":false}]}`, ErrUnsupported, "pre_tokenizer.pretokenizers[0].pattern"},
		{"pre_tokenizer", `{"type":"Split","pattern":{"Regex":"\\bfoo"},"behavior":"Isolated"}`, ErrUnsupported, "pre_tokenizer.pattern"},
		{"pre_tokenizer", `{"type":"Split","pattern":{"Regex":"a++"},"behavior":"Isolated"}`, ErrUnsupported, "pre_tokenizer.pattern"},
		{"pre_tokenizer", `{"type":"Split","pattern":{"Regex":"(a"},"behavior":"Isolated"}`, ErrUnsupported, "pre_tokenizer.pattern"},
		{"pre_tokenizer", `{"type":"Split","pattern":{"String":"-"},"behavior":"Sideways"}`, ErrInvalid, "pre_tokenizer.behavior"},
		{"pre_tokenizer", `{"type":"Whitespace"}`, ErrUnsupported, "pre_tokenizer.type"},
		{"pre_tokenizer", `{"type":"Metaspace","replacement":"▁","prepend_scheme":"sometimes"}`, ErrInvalid, "pre_tokenizer.prepend_scheme"},
		{"pre_tokenizer", `{"type":"Metaspace","replacement":"__"}`, ErrInvalid, "pre_tokenizer.replacement"},
		{"pre_tokenizer", `{"type":"Sequence","pretokenizers":[{"type":"ByteLevel"},{"type":"Digits"}]}`, ErrUnsupported, "pre_tokenizer.pretokenizers[1]"},
		{"pre_tokenizer", `{"pattern":{"String":"-"}}`, ErrInvalid, "pre_tokenizer.type"},
		{"post_processor", `{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>"}},{"Sequence":{"id":"A"}}],"special_tokens":{}}`, ErrInvalid, "post_processor.single[0]"},
		{"post_processor", `{"type":"Sequence","processors":[{"type":"Fancy"}]}`, ErrUnsupported, "post_processor.processors[0].type"},
		{"decoder", `{"type":"WordPiece"}`, ErrUnsupported, "decoder.type"},
		{"decoder", `{"type":"Metaspace"}`, ErrInvalid, "decoder.replacement"},
		{"decoder", `{"type":"Strip","content":"ab","start":1,"stop":0}`, ErrInvalid, "decoder.content"},
		{"added_tokens", `{"not":"a list"}`, ErrInvalid, ""},
	}
	for _, tt := range tests {
		t.Run(tt.field+"="+tt.value, func(t *testing.T) {
			_, err := Load(strings.NewReader(build(tt.field, tt.value)))
			if !errors.Is(err, tt.want) {
				t.Fatalf("Load: %v, want an error wrapping %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("error %q does not name %q", err, tt.mention)
			}
		})
	}
	if _, err := Load(strings.NewReader("{not json")); !errors.Is(err, ErrInvalid) {
		t.Errorf("Load(bad JSON) = %v, want ErrInvalid", err)
	}
	if _, err := LoadFile("testdata/does-not-exist.json"); err == nil {
		t.Error("LoadFile of a missing file succeeded")
	}
}

// TestSplitBehaviors uses the examples of the tokenizers documentation.
func TestSplitBehaviors(t *testing.T) {
	tests := []struct {
		pre  string
		text string
		want []string
	}{
		{`{"type":"Split","pattern":{"String":"-"},"behavior":"Removed","invert":false}`, "the-final--countdown", []string{"the", "final", "countdown"}},
		{`{"type":"Split","pattern":{"String":"-"},"behavior":"Isolated","invert":false}`, "the-final--countdown", []string{"the", "-", "final", "-", "-", "countdown"}},
		{`{"type":"Split","pattern":{"String":"-"},"behavior":"MergedWithPrevious","invert":false}`, "the-final--countdown", []string{"the-", "final-", "-", "countdown"}},
		{`{"type":"Split","pattern":{"String":"-"},"behavior":"MergedWithNext","invert":false}`, "the-final--countdown", []string{"the", "-final", "-", "-countdown"}},
		{`{"type":"Split","pattern":{"String":"-"},"behavior":"Contiguous","invert":false}`, "the-final--countdown", []string{"the", "-", "final", "--", "countdown"}},
		{`{"type":"Split","pattern":{"String":"-"},"behavior":"Removed","invert":true}`, "the-final--countdown", []string{"-", "-", "-"}},
		{`{"type":"Digits","individual_digits":true}`, "Call 123 please", []string{"Call ", "1", "2", "3", " please"}},
		{`{"type":"Digits","individual_digits":false}`, "Call 123 please", []string{"Call ", "123", " please"}},
		{`{"type":"ByteLevel","add_prefix_space":true,"use_regex":true}`, "Hello  world", []string{" Hello", " ", " world"}},
		{`{"type":"ByteLevel","add_prefix_space":true,"use_regex":false}`, "Hello world", []string{" Hello world"}},
		{`{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":` + jsonString(tQwen2) + `},"behavior":"Isolated","invert":false},{"type":"Digits","individual_digits":false}]}`, "ab1234", []string{"ab", "1", "2", "3", "4"}},
	}
	for _, tt := range tests {
		steps, _, err := parsePreTokenizer([]byte(tt.pre), "pre_tokenizer")
		if err != nil {
			t.Fatalf("%s: %v", tt.pre, err)
		}
		pieces := []string{tt.text}
		for _, s := range steps {
			var next []string
			for _, p := range pieces {
				next = s.split(next, p)
			}
			pieces = next
		}
		if !slices.Equal(pieces, tt.want) {
			t.Errorf("%s on %q = %q, want %q", tt.pre, tt.text, pieces, tt.want)
		}
	}
}

const tQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '\\', '"':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteByte('"')
	return b.String()
}

func TestDecode(t *testing.T) {
	llama2 := loadFixture(t, "llama2-mini.json")
	gpt2 := loadFixture(t, "gpt2-mini.json")
	noDecoder, err := Load(strings.NewReader(`{"model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":[]}}`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		tok  *Tokenizer
		ids  []uint32
		want string
	}{
		{"sentencepiece style", llama2, []uint32{15043, 3186}, "Hello world"},
		{"special kept", llama2, []uint32{1, 15043, 3186}, "<s> Hello world"},
		{"byte fallback", llama2, []uint32{29871, 243, 162, 155, 131}, "😀"},
		{"broken byte fallback", llama2, []uint32{243, 162}, "\uFFFD\uFFFD"},
		{"unknown ids skipped", llama2, []uint32{15043, 999999}, "Hello"},
		{"byte level", gpt2, []uint32{15496, 11, 995, 0}, "Hello, world!"},
		{"byte level special", gpt2, []uint32{15496, 50256}, "Hello<|endoftext|>"},
		{"byte level broken UTF-8", gpt2, []uint32{158}, "\uFFFD"}, // the byte 0xE2 alone,
		{"no decoder", noDecoder, []uint32{0, 1, 0}, "a b a"},
	}
	for _, tt := range tests {
		if got := tt.tok.Decode(tt.ids); got != tt.want {
			t.Errorf("%s: Decode(%v) = %q, want %q", tt.name, tt.ids, got, tt.want)
		}
	}
}

func TestLossyUTF8(t *testing.T) {
	const r = "\uFFFD"
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{"a\xe2\x82", "a" + r},
		{"\xe2\x82A", r + "A"},
		{"\x80\x80", r + r},
		{"\xf0\x90\x80", r},
		{"\xed\xa0\x80", r + r + r},
		{"\xf4\x90\x80\x80", r + r + r + r},
		{"\xc0\xaf", r + r},
		{"\xe0\x80\xaf", r + r + r},
		{"\xf0\x9f\x98", r},
		{"\xf0\x9f\x98\x80\xff", "😀" + r},
		{"\uFFFD", "\uFFFD"},
	}
	for _, tt := range tests {
		if got := lossyUTF8([]byte(tt.in)); got != tt.want {
			t.Errorf("lossyUTF8(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	texts := []string{
		"", "Hello, world!", "  leading and trailing  ", "tabs\tand\nnewlines\r\n\n",
		"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", "<think>\nhmm\n</think>",
		"中文, русский, العربية, हिन्दी, 日本語", "emoji 😀👍🏽 and ZWJ 👩‍👩‍👧", "e\u0301 combining",
		"numbers 3.14159 1,000,000 2024-06-01", "don't I'M we'LL", strings.Repeat("ab", 500),
		strings.Repeat(" ", 300) + "x", "\x00\x01\x7f", "\xff\xfe invalid \xe2\x82",
	}
	tokenizers := map[string]*Tokenizer{
		"default": Default(),
		"gpt2":    loadFixture(t, "gpt2-mini.json"),
		"llama3":  loadFixture(t, "llama3-mini.json"),
	}
	for name, tok := range tokenizers {
		for _, s := range texts {
			ids := tok.Encode(s, false)
			if got, want := tok.Decode(ids), lossyUTF8([]byte(s)); got != want {
				t.Errorf("%s: Decode(Encode(%q)) = %q, want %q (ids %v)", name, s, got, want, ids)
			}
		}
	}
}

func TestDefault(t *testing.T) {
	tok := Default()
	if tok != Default() {
		t.Error("Default() returned a new tokenizer on the second call")
	}
	specials := []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<think>", "</think>"}
	for _, s := range specials {
		id, ok := tok.TokenID(s)
		if !ok {
			t.Fatalf("TokenID(%q) missing", s)
		}
		if got := tok.Encode("x"+s+"x", false); len(got) != 3 || got[1] != id {
			t.Errorf("Encode(%q) = %v, want the id %d in the middle", "x"+s+"x", got, id)
		}
	}
	chat := tok.Encode("<|im_start|>assistant\nHi<think>x</think><|im_end|>", false)
	if got := tok.DecodeSkipSpecial(chat); got != "assistant\nHi<think>x</think>" {
		t.Errorf("DecodeSkipSpecial = %q: want the special markers dropped and the non-special <think> kept", got)
	}
	if !tok.IsSpecial(chat[0]) || tok.IsSpecial(mustID(t, tok, "<think>")) || tok.IsSpecial('a') {
		t.Error("IsSpecial does not follow the added tokens' special flag")
	}
	if got := tok.Encode("<|im_start", false); slices.Contains(got, mustID(t, tok, "<|im_start|>")) {
		t.Errorf("a partial marker encoded as the special token: %v", got)
	}
	if n := tok.VocabSize(); n < 256+100 || n > 2048 {
		t.Errorf("VocabSize() = %d, want a few hundred merges over 256 bytes", n)
	}
	// Bytes the English sample never showed still encode, one byte token
	// each (ids are byte values below 256); an invalid byte is U+FFFD, as
	// engines, handed Python str, see it.
	if got, want := tok.Encode("\x00😀\xff", false), []uint32{0x00, 0xF0, 0x9F, 0x98, 0x80, 0xEF, 0xBF, 0xBD}; !slices.Equal(got, want) {
		t.Errorf("Encode of unseen bytes = %v, want %v", got, want)
	}
	// The tokenizer learned the sample's common words, so they are one
	// token each.
	for _, w := range []string{" the", " router", " tokens"} {
		if got := tok.Encode(w, false); len(got) != 1 {
			t.Errorf("Encode(%q) = %v, want one token", w, got)
		}
	}
}

func mustID(t *testing.T, tok *Tokenizer, s string) uint32 {
	t.Helper()
	id, ok := tok.TokenID(s)
	if !ok {
		t.Fatalf("TokenID(%q) missing", s)
	}
	return id
}

// TestMergeStrategies checks that the heap used for long pieces merges
// exactly as the scan used for short ones.
func TestMergeStrategies(t *testing.T) {
	m := Default().model
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := "etaoinshrdlu cmwfgypbvkjxqz,.'"
	for n := 0; n < 2000; n++ {
		var b strings.Builder
		for range 1 + rng.IntN(160) {
			b.WriteByte(alphabet[rng.IntN(len(alphabet))])
		}
		syms := m.symbols(nil, b.String())
		scan := m.mergeScan(slices.Clone(syms), &scratch{})
		heap := m.mergeHeap(slices.Clone(syms), &scratch{})
		if !slices.Equal(scan, heap) {
			t.Fatalf("%q: scan %v, heap %v", b.String(), scan, heap)
		}
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok := loadFixture(t, "llama3-mini.json")
	def := Default()
	texts := []string{"Hello world", "the router and the cache", strings.Repeat("tokens and blocks ", 50), "中文 😀 \xff"}
	want := make([][]uint32, len(texts))
	for i, s := range texts {
		want[i] = def.Encode(s, true)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 50 {
				i := (g + k) % len(texts)
				if got := def.Encode(texts[i], true); !slices.Equal(got, want[i]) {
					errs <- fmt.Sprintf("Encode(%q) = %v, want %v", texts[i], got, want[i])
					return
				}
				tok.Encode(texts[i], true)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
