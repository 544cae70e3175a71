// Package tokenizer turns text into token ids exactly as a Hugging Face
// tokenizer.json of the byte-level BPE family does (GPT-2, Llama 3,
// Qwen2/Qwen3, Mistral NeMo), so that the router and the engines it fronts
// agree on the ids that KV-cache blocks are keyed by. It also renders chat
// messages into prompts for the common chat formats.
//
// The pipeline is the one of the Rust `tokenizers` library: added tokens are
// cut out of the raw text first, the rest is normalized, pre-tokenized into
// pieces, and each piece is encoded by the BPE model; a post-processor may
// then add special tokens such as a BOS.
//
// Supported tokenizer.json features:
//
//   - model: "BPE" with vocab, merges as "a b" strings or ["a", "b"] pairs,
//     unk_token, fuse_unk, byte_fallback and ignore_merges.
//   - added_tokens, with special, normalized, single_word, lstrip and rstrip.
//   - normalizer: null, NFC, Lowercase, Prepend, Replace with a literal
//     pattern, Strip, and a Sequence of these. NFC is applied as the
//     identity: that is exact for text already in NFC, which is nearly all
//     text, but text with decomposed accents may tokenize differently from
//     the engine. NFD, NFKC and NFKD change common text and are refused.
//   - pre_tokenizer: ByteLevel (add_prefix_space, use_regex), Split with a
//     literal pattern or one of the known regular expressions of GPT-2,
//     Llama 3, Qwen2, Mistral NeMo (Tekken) and o200k, Digits, and a
//     Sequence of these. Go's regexp has no lookahead, so those expressions
//     are implemented by hand and recognised by their text; any other
//     regular expression is refused. ByteLevel must come last.
//   - post_processor: ByteLevel, TemplateProcessing, RobertaProcessing,
//     BertProcessing, and a Sequence of these (single sequences only).
//   - decoder: ByteLevel, Replace with a literal pattern, ByteFallback,
//     Fuse, Strip, and a Sequence of these.
//
// Anything else (Unigram, WordPiece and WordLevel models, Metaspace,
// unknown normalizers) makes Load fail with an error wrapping
// ErrUnsupported that names the field. The truncation and padding sections
// are ignored, as engines ignore them when they tokenize prompts.
//
// Chat templates in tokenizer_config.json are Jinja programs; this package
// does not execute Jinja. DetectTemplate recognises the built-in formats by
// their marker tokens, and NewTemplate accepts a Go text/template for
// anything else.
package tokenizer
