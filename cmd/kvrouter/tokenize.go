// This file holds `kvrouter tokenize`: a prompt or chat request tokenized as the engine would.

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"kvrouter/internal/frontdoor"
	"kvrouter/internal/tokenizer"
)

func init() { commands = append(commands, newTokenizeCmd) }

type tokenizeFlags struct {
	tokenizer, config, chatTemplate string
	text, textFile, chat            string
	addSpecial, json                bool
}

func newTokenizeCmd() *cobra.Command {
	var f tokenizeFlags
	cmd := &cobra.Command{
		Use:   "tokenize --tokenizer PATH (--text STRING | --text-file FILE | --chat FILE) [--json]",
		Short: "Tokenize a prompt or a chat request as the engine would",
		Long: `tokenize turns a prompt into token ids with a model's own tokenizer files, as
vLLM and SGLang do, so that an operator can check that the router sees the ids
the engine sees (compare with the engine's POST /tokenize).

It loads and runs exactly what 'kvrouter serve --tokenizer' does.

--tokenizer is a tokenizer.json, or a model directory holding tokenizer.json
and, when present, tokenizer_config.json (special tokens, add_bos_token, the
chat template) and chat_template.jinja (which wins over the config's template);
or "demo", the embedded tokenizer of the simulated fleet.

  --text, --text-file  a completion prompt. Special tokens (a BOS for most
                       models) are added only with --add-special-tokens, which
                       is what engines do for /v1/completions.
  --chat               an OpenAI chat completion request body (JSON): messages,
                       tools, chat_template_kwargs (e.g. {"enable_thinking":
                       false}), add_generation_prompt (default true),
                       continue_final_message, add_special_tokens (default
                       false). It is rendered with the model's chat template
                       and tokenized without adding special tokens, as engines
                       do: the template carries them.

With --json the output is one JSON object {"token_ids": [...], "text": "..."},
where text is the rendered prompt for --chat and the input text otherwise.

Text that is not valid UTF-8 is tokenized with each bad sequence replaced by
U+FFFD, as the engines (which receive decoded strings) see it.

Exit status 1, with a message naming the problem, for a malformed or
unsupported tokenizer file, config or template, or a bad request.`,
		Example: `  kvrouter tokenize --tokenizer ./Qwen3-8B --text "Hello world" --json
  kvrouter tokenize --tokenizer ./Llama-3.1-8B-Instruct --text-file prompt.txt --add-special-tokens --json
  kvrouter tokenize --tokenizer tokenizer.json --tokenizer-config tokenizer_config.json --chat request.json --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runTokenize(cmd.OutOrStdout(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.tokenizer, "tokenizer", "", "tokenizer.json, or a model directory holding it (required)")
	fl.StringVar(&f.config, "tokenizer-config", "", "tokenizer_config.json to use (default: the one beside tokenizer.json in a directory)")
	fl.StringVar(&f.chatTemplate, "chat-template", "", "Jinja chat template file overriding the model's, as the engine's --chat-template (or a built-in format: "+strings.Join(tokenizer.TemplateNames(), ", ")+")")
	fl.StringVar(&f.text, "text", "", "completion prompt text")
	fl.StringVar(&f.textFile, "text-file", "", "file holding the completion prompt")
	fl.StringVar(&f.chat, "chat", "", "file holding an OpenAI chat completion request body")
	fl.BoolVar(&f.addSpecial, "add-special-tokens", false, "add the tokenizer's special tokens (BOS) to --text/--text-file, as engines do for completions")
	fl.BoolVar(&f.json, "json", false, `print {"token_ids": [...], "text": "..."}`)
	return cmd
}

func runTokenize(w io.Writer, f tokenizeFlags) error {
	if f.tokenizer == "" {
		return errors.New("--tokenizer is required")
	}
	inputs := 0
	for _, s := range []string{f.text, f.textFile, f.chat} {
		if s != "" {
			inputs++
		}
	}
	if inputs != 1 {
		return errors.New("give exactly one of --text, --text-file and --chat")
	}
	// What serve loads and runs, so that this shows what it routes on.
	local, err := frontdoor.LoadLocal(f.tokenizer, f.config, f.chatTemplate)
	if err != nil {
		return err
	}
	var out struct {
		TokenIDs []uint32 `json:"token_ids"`
		Text     string   `json:"text"`
	}
	switch {
	case f.chat != "":
		if f.addSpecial {
			return errors.New("--add-special-tokens applies to --text and --text-file: chat prompts carry their special tokens")
		}
		body, err := os.ReadFile(f.chat)
		if err != nil {
			return fmt.Errorf("--chat: %w", err)
		}
		req, add, err := frontdoor.ParseChat(body)
		if err != nil {
			return fmt.Errorf("--chat %s: %w", f.chat, err)
		}
		if out.Text, out.TokenIDs, err = local.Chat(req, add); err != nil {
			return fmt.Errorf("--chat %s: %w", f.chat, err)
		}
	default:
		out.Text = f.text
		if f.textFile != "" {
			b, err := os.ReadFile(f.textFile)
			if err != nil {
				return fmt.Errorf("--text-file: %w", err)
			}
			out.Text = string(b)
		}
		out.TokenIDs = local.Text(out.Text, f.addSpecial)
	}
	if out.TokenIDs == nil {
		out.TokenIDs = []uint32{}
	}
	if f.json {
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		return enc.Encode(out)
	}
	ids := make([]string, len(out.TokenIDs))
	for i, id := range out.TokenIDs {
		ids[i] = fmt.Sprint(id)
	}
	_, err = fmt.Fprintf(w, "%d tokens\n%s\n", len(ids), strings.Join(ids, " "))
	return err
}
