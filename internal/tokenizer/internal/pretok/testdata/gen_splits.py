#!/usr/bin/env python3
"""Regenerates splits.jsonl, the oracle for pretok's hand-written splitters.

It runs the original expressions through the `regex` module (a backtracking
engine with \\p{..} classes and lookahead, like Oniguruma that Hugging Face
tokenizers use) on hand-picked and seeded random strings. Run from this
directory:  python3 gen_splits.py > splits.jsonl
The alphabet keeps to characters whose Unicode properties are the same in
Go's tables (Unicode 15.0) and in newer versions.
"""
import json
import random

import regex

PATTERNS = {
    "gpt2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    "llama3": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "tekken": r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "o200k": r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}

HANDPICKED = [
    "",
    "Hello world",
    "Hello, world!",
    "I'm sure you're right, they've said we'll see what he'd do; it's Bob's.",
    "I'M SURE YOU'RE RIGHT, THEY'VE SAID WE'LL SEE",
    "don't 's 't 're 've 'm 'll 'd 'x ''s",
    "'ſ 'S 'Re 'LL",
    "1 12 123 1234 12345 3.14159 1,000,000 -42 +7",
    "a  b   c    d",
    "word   \n  word\n\n\nword \r\n word",
    "trailing spaces   ",
    "   leading spaces",
    "\n",
    " \n ",
    "tabs\tand\t\tmore\ttabs",
    "!!! ??? ... --- ===>",
    " !!!\n\nnext",
    "path/to/file.txt and a/b/c // comment\n/",
    "CamelCaseWord HTTPServer iPhone McDonald's XMLHttpRequest",
    "ÉCOLE école Straße ǅemal ʰa",
    "中文字符 and 日本語テキスト",
    "مرحبا بالعالم",
    "café naïve e\u0301 \u0301x",
    "½ Ⅻ ٣٤٥ x² 2²",
    "nbsp\u00a0here ideographic\u3000space line\u2028sep",
    "emoji 😀😀 mixed😀text",
    "<|im_start|>user\nHi<|im_end|>",
    "def f(x):\n    return x + 1\n\n\nprint(f(2))",
    "\u200bzero\u200bwidth",
    "ctrl\x00\x01chars",
]

UNITS = [
    "a", "b", "z", "A", "Z", "hello", "World", "HELLO", "CamelCase", "HTTPServer",
    "é", "É", "ß", "ſ", "Ǆ", "ǅ", "ʰ", "中", "文", "ا", "ه", "Ω", "ω",
    "\u0301", "\u0903",
    "0", "7", "42", "12345", "½", "Ⅻ", "٣", "²",
    " ", " ", " ", "  ", "\t", "\n", "\r", "\r\n", "\n\n", "\x0b", "\x0c",
    "\u00a0", "\u3000", "\u2028", "\u0085", "\u2003",
    "'", "'s", "'S", "'ſ", "'re", "'RE", "'ll", "'Ll", "'ve", "'m", "'d", "'t", "'x",
    ".", ",", "!", "?", "-", "/", "//", "\"", "(", ")", "…", "—", "😀", "$", "_", "@",
    "\x00", "\x01", "\u200b",
]


def split(pat, text):
    pieces, last = [], 0
    for m in regex.finditer(pat, text):
        if m.start() > last:
            pieces.append(text[last:m.start()])
        pieces.append(m.group())
        last = m.end()
    if last < len(text):
        pieces.append(text[last:])
    return pieces


def main():
    rng = random.Random(20240601)
    texts = list(HANDPICKED)
    for _ in range(150):
        texts.append("".join(rng.choice(UNITS) for _ in range(rng.randint(1, 24))))
    for name, pat in PATTERNS.items():
        for text in texts:
            print(json.dumps({"pattern": name, "text": text, "pieces": split(pat, text)}))


if __name__ == "__main__":
    main()
