package pretok

import (
	"bufio"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestSplitOracle checks every built-in pattern against splits computed by
// a real backtracking regex engine (testdata/gen_splits.py).
func TestSplitOracle(t *testing.T) {
	f, err := os.Open("testdata/splits.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	byName := make(map[string]*Pattern)
	for _, p := range Patterns {
		byName[p.Name()] = p
	}
	seen := make(map[string]int)
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for line := 1; sc.Scan(); line++ {
		var c struct {
			Pattern string   `json:"pattern"`
			Text    string   `json:"text"`
			Pieces  []string `json:"pieces"`
		}
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("line %d: %v", line, err)
		}
		p := byName[c.Pattern]
		if p == nil {
			t.Fatalf("line %d: unknown pattern %q", line, c.Pattern)
		}
		seen[c.Pattern]++
		if c.Pieces == nil {
			c.Pieces = []string{}
		}
		got := p.Split([]string{}, c.Text)
		if !slices.Equal(got, c.Pieces) {
			t.Errorf("line %d: %s.Split(%q)\n got %q\nwant %q", line, c.Pattern, c.Text, got, c.Pieces)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, p := range Patterns {
		if seen[p.Name()] < 100 {
			t.Errorf("pattern %s: only %d oracle cases", p.Name(), seen[p.Name()])
		}
	}
}

func TestSplitKnown(t *testing.T) {
	tests := []struct {
		p    *Pattern
		text string
		want []string
	}{
		{GPT2, "Hello world", []string{"Hello", " world"}},
		{GPT2, "it's we'll they're I've I'm you'd don't", []string{"it", "'s", " we", "'ll", " they", "'re", " I", "'ve", " I", "'m", " you", "'d", " don", "'t"}},
		{GPT2, "IT'S", []string{"IT", "'", "S"}},
		{GPT2, "a   b", []string{"a", "  ", " b"}},
		{GPT2, "x  \n\ny", []string{"x", "  \n", "\n", "y"}},
		{GPT2, "end  ", []string{"end", "  "}},
		{GPT2, "12345 67", []string{"12345", " 67"}},
		{GPT2, "wait...!? ok", []string{"wait", "...!?", " ok"}},
		{Llama3, "IT'S 12345", []string{"IT", "'S", " ", "123", "45"}},
		{Llama3, "a\n\n  b", []string{"a", "\n\n", " ", " b"}},
		{Llama3, "(hello)", []string{"(hello", ")"}},
		{Llama3, "ok.\n\nNext", []string{"ok", ".\n\n", "Next"}},
		{Qwen2, "2024", []string{"2", "0", "2", "4"}},
		{Tekken, "HTTPServer iPhone", []string{"HTTPServer", " i", "Phone"}},
		{O200k, "DON'T you're", []string{"DON'T", " you're"}},
	}
	for _, tt := range tests {
		got := tt.p.Split(nil, tt.text)
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s.Split(%q) = %q, want %q", tt.p.Name(), tt.text, got, tt.want)
		}
	}
}

func TestLookup(t *testing.T) {
	for _, p := range Patterns {
		got, ok := Lookup(p.Source())
		if !ok || got != p {
			t.Errorf("Lookup(%s source) = %v, %v", p.Name(), got, ok)
		}
	}
	if _, ok := Lookup(`\w+|[^\w\s]+`); ok {
		t.Error("Lookup accepted an unknown expression")
	}
}

func TestByteLevelAlphabet(t *testing.T) {
	tests := []struct {
		b byte
		r rune
	}{
		{' ', 'Ġ'}, {'\n', 'Ċ'}, {'\t', 'ĉ'}, {'!', '!'}, {'~', '~'}, {0, 'Ā'}, {0xAD, 'Ń'}, {0xFF, 'ÿ'}, {0x7F, 'ġ'},
	}
	for _, tt := range tests {
		if got := ByteRune(tt.b); got != tt.r {
			t.Errorf("ByteRune(%#x) = %q, want %q", tt.b, got, tt.r)
		}
	}
	seen := make(map[rune]bool)
	for b := 0; b < 256; b++ {
		r := ByteRune(byte(b))
		if seen[r] {
			t.Fatalf("rune %q used twice", r)
		}
		seen[r] = true
		if got, ok := RuneByte(r); !ok || got != byte(b) {
			t.Errorf("RuneByte(%q) = %#x, %v, want %#x", r, got, ok, b)
		}
	}
	for _, r := range []rune{' ', '\n', 'ń', '中', -1, utf8.RuneError} {
		if _, ok := RuneByte(r); ok {
			t.Errorf("RuneByte(%q) accepted a rune outside the alphabet", r)
		}
	}
	enc := AppendEncoded(nil, "a b\n\xff")
	if string(enc) != "aĠbĊÿ" {
		t.Errorf("AppendEncoded = %q", enc)
	}
	dec, ok := AppendDecoded([]byte("x"), string(enc))
	if !ok || string(dec) != "xa b\n\xff" {
		t.Errorf("AppendDecoded = %q, %v", dec, ok)
	}
	if dec, ok := AppendDecoded([]byte("x"), "a b"); ok || string(dec) != "x" {
		t.Errorf("AppendDecoded of a raw space = %q, %v, want refusal", dec, ok)
	}
}

func FuzzSplit(f *testing.F) {
	for _, s := range []string{"", "Hello world", "I'm  \n\n x", "½Ⅻ٣ 😀", "\xff\xfe a", "'ſ 'S", "ǅemal HTTPServer"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, p := range Patterns {
			pieces := p.Split(nil, s)
			if got := strings.Join(pieces, ""); got != s {
				t.Fatalf("%s: pieces %q do not concatenate to %q", p.Name(), pieces, s)
			}
			for _, piece := range pieces {
				if piece == "" {
					t.Fatalf("%s: empty piece in %q", p.Name(), pieces)
				}
			}
		}
	})
}

// FuzzFastPaths: matchAt's shortcuts for ASCII words and digits end where
// trying the alternatives in turn does, at every position.
func FuzzFastPaths(f *testing.F) {
	for _, s := range []string{"Hello world 12345", " a1 b2 'sx", "  x\ny 9½ é", "word's ῼx 3٣", "a\xffb 7"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, p := range Patterns {
			for i := 0; i < len(s); i++ {
				if got, want := p.matchAt(s, i), p.matchAlts(s, i); got != want {
					t.Fatalf("%s at %d of %q: %d, want %d", p.Name(), i, s, got, want)
				}
			}
		}
	})
}
