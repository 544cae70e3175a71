// Package tokenizer turns prompts into token ids exactly as the engines
// the router fronts (vLLM, SGLang) do with a model's Hugging Face tokenizer
// files, so that the router and the engines agree on the ids that KV-cache
// blocks are keyed by: one token of difference and every block hash after
// it differs.
//
// # Tokenizer files
//
// LoadModel reads a tokenizer.json, or a model directory holding it with
// tokenizer_config.json and chat_template.jinja, as transformers'
// AutoTokenizer does (fast tokenizers only). The tokenizer.json pipeline is
// that of the Rust tokenizers library: added tokens are cut out of the raw
// text first, the rest is normalized, pre-tokenized into pieces, each
// piece encoded by the BPE model, and a post-processor may add special
// tokens such as a BOS. Supported, which covers the byte-level BPE
// families (GPT-2, Llama 3, Qwen2/3, DeepSeek V3/R1, GPT-OSS, Mistral
// NeMo) and the SentencePiece-style BPE ones (Llama 2, Mistral, Gemma):
//
//   - model: "BPE" with vocab, merges as "a b" strings or ["a", "b"] pairs,
//     unk_token, fuse_unk, byte_fallback and ignore_merges.
//   - added_tokens, with special, normalized, single_word, lstrip, rstrip.
//   - normalizer: NFC, NFD, NFKC, NFKD (golang.org/x/text/unicode/norm),
//     Lowercase, Prepend, Replace (literal or regular expression), Strip,
//     and a Sequence of these.
//   - pre_tokenizer: ByteLevel (add_prefix_space, use_regex), Metaspace
//     (replacement, prepend_scheme, split), Split with a literal or a
//     regular expression, Digits, and a Sequence of these. The well-known
//     expressions (GPT-2, Llama 3, Qwen2, Tekken, o200k) have hand-written
//     matchers; any other goes to Go's regexp with \s, \d and \w given
//     their Unicode meaning and a trailing `|\s+(?!\S)|\s+` matched by hand.
//     Other lookaround, possessive quantifiers, back references and anchors
//     are refused.
//   - post_processor: ByteLevel, TemplateProcessing, RobertaProcessing,
//     BertProcessing, and a Sequence of these (single sequences).
//   - decoder: ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip,
//     and a Sequence of these.
//
// Anything else (Unigram, WordPiece and WordLevel models, other
// normalizers and pre-tokenizers) makes loading fail with an error
// wrapping ErrUnsupported that names the field and the type: never a
// silent approximation. Truncation and padding are ignored, as engines
// ignore them for prompts.
//
// From tokenizer_config.json come the special tokens the chat template
// sees (bos_token, eos_token, ..., with the tokenizer class's defaults) and,
// for the Llama and Gemma tokenizer classes, add_bos_token and
// add_eos_token, which transformers turns into the post-processor
// (DeepSeek V3's tokenizer.json adds no BOS, its LlamaTokenizerFast does).
//
// Special tokens: completions (/v1/completions) are encoded with
// addSpecial=true, as vLLM and SGLang encode them by default; chat prompts
// with addSpecial=false, because the template writes the BOS itself and
// both engines tokenize the rendered chat with add_special_tokens=False
// (SGLang only adds nothing where the tokenizer would add specials).
//
// Invalid UTF-8: the engines receive Python str, decoded from JSON, never
// raw bytes, so Encode replaces each ill-formed sequence by U+FFFD (one per
// maximal subpart, as Python's "replace" error handler and Go's JSON
// decoder do) before tokenizing.
//
// # Speed
//
// Tokenization is on every request's path. The known pre-tokenizer
// expressions are matched by hand, with ASCII words and digits taken
// without trying the alternatives in turn, and their pieces go to the BPE
// model as they are found. Pieces are cached with their ids (a piece of up
// to seven bytes keyed by its own bytes, longer ones by hash). A prefix
// cache keeps the ids of text already seen, in content-defined chunks cut
// where a cut cannot change the ids (see prefix.go), so a prompt that
// shares a system prompt or earlier turns with an earlier one is tokenized
// only past what they share; it applies to tokenizers whose pipeline makes
// such cuts safe (the byte-level families), and tests hold its results to
// those of encoding whole.
//
// # Chat templates
//
// A model's chat template is a Jinja program. It runs on
// github.com/ardanlabs/jinja (v1.8.0), a pure-Go Jinja engine written for
// LLM chat templates. Evaluated against real Jinja2 set up as transformers
// sets it up, on the templates of Llama 3.x, Qwen3, Gemma 3 and 4, Mistral
// (Ministral 3), DeepSeek V3 and GPT-OSS with system prompts, tools,
// multi-turn reasoning and multi-part content, it rendered 111 of 117 cases
// byte for byte where github.com/nikolalohinski/gonja/v2 rendered 83 (gonja
// does not parse the Gemma 3 and GPT-OSS templates and loses dict key
// order, which tojson prints). Its deviations are handled here: its tojson
// sorts keys and escapes <>& when given an indent, so tojson is replaced by
// Python's json.dumps (ensure_ascii=False, as transformers'); a trailing
// newline of the template is dropped and line ends normalized, as Jinja2's
// lexer does; strftime_now takes an injectable clock; the `{%+` and `+%}`
// modifiers it lacks are refused. It remains more lenient than Jinja2 on
// None and on adding strings to lists, where Jinja2 raises: such requests
// fail on the engine anyway. Its trim_blocks and lstrip_blocks behaviour,
// loop controls, namespace, selectattr, raise_exception and the string
// methods templates call match Jinja2 on the tested templates.
//
// Model.RenderChat renders an OpenAI chat request as vLLM does: messages
// preprocessed as vLLM's chat_utils does (text parts joined by newlines,
// or kept as parts for templates that loop over content; tool call
// arguments parsed from their JSON string; reasoning passed as reasoning
// and reasoning_content), tools shaped as vLLM's model_dump gives them,
// chat_template_kwargs merged over add_generation_prompt (default true),
// then transformers' continue_final_message cut. SGLang differs in edge
// cases: it always renders with add_generation_prompt=True and appends the
// continued final message instead of cutting.
//
// The built-in formats (ChatML, Llama3, Plain) and Go text/templates
// remain for the embedded demo tokenizer and as --chat-template overrides;
// DetectTemplate recognises the built-in formats by their marker tokens.
package tokenizer
