package main

import (
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"kvrouter/internal/kvevents"
)

func init() { commands = append(commands, newDecodeCmd) }

func newDecodeCmd() *cobra.Command {
	var hexPayload, file, frames string
	var maxPayload int
	cmd := &cobra.Command{
		Use:   "decode (--hex HEX | --file PATH | --frames PATH)",
		Short: "Decode engine KV event batches (vLLM/SGLang msgpack) to JSON lines",
		Long: `decode reads KV event batches as vLLM and SGLang publish them (msgpack, array
or map form, any build since 2025) and prints one JSON object per batch on stdout:

  {"ts":...,"dp_rank":0,"events":[{"type":"BlockStored","block_hashes":[...],...}]}

Block hashes print as unsigned 64-bit decimals; "tier" is device, host, disk or
external; "ownership" is null (the engine's own blocks) or "kvcr" (a KV cache
runner's). With --frames each object also carries the message's "topic" and "seq".

A malformed batch stops the command with exit status 1 and one line on stderr
naming the event and field at fault. Events the decoder drops (unknown medium or
ownership) or skips (unknown type) are left out of the output.`,
		Example: `  kvrouter decode --frames internal/kvevents/testdata/sim-map.frames
  kvrouter decode --hex 93cb41d954fc4020000090c0
  kvrouter decode --file payload.bin`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			in := decodeInput{hex: hexPayload, file: file, frames: frames, maxPayload: maxPayload,
				useHex: cmd.Flags().Changed("hex"), useFile: cmd.Flags().Changed("file")}
			src, withFrame, closeSrc, err := in.open(cmd.InOrStdin())
			if err != nil {
				return err
			}
			defer closeSrc()
			d := &kvevents.Decoder{MaxPayload: maxPayload}
			return kvevents.WriteJSON(cmd.OutOrStdout(), src, d, withFrame)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&hexPayload, "hex", "", "one batch payload as hex digits")
	fl.StringVar(&file, "file", "", `file holding one raw batch payload ("-" for stdin)`)
	fl.StringVar(&frames, "frames", "", `capture file, one "<topic> <seq 16 hex> <payload hex>" line per message ("-" for stdin)`)
	fl.IntVar(&maxPayload, "max-payload", kvevents.DefaultMaxPayload, "largest payload accepted, in bytes")
	cmd.MarkFlagsMutuallyExclusive("hex", "file", "frames")
	cmd.MarkFlagsOneRequired("hex", "file", "frames")
	return cmd
}

// decodeInput is the one input the flags name.
type decodeInput struct {
	hex, file, frames string
	useHex, useFile   bool
	maxPayload        int
}

func (in decodeInput) open(stdin io.Reader) (src kvevents.Source, withFrame bool, closeFn func(), err error) {
	noop := func() {}
	switch {
	case in.useHex:
		p, err := hex.DecodeString(strings.TrimSpace(in.hex))
		if err != nil {
			return nil, false, noop, fmt.Errorf("--hex: %w", err)
		}
		return kvevents.SinglePayload(p), false, noop, nil
	case in.useFile:
		r, closeFn, err := openInput(in.file, stdin)
		if err != nil {
			return nil, false, noop, fmt.Errorf("--file: %w", err)
		}
		defer closeFn()
		// One byte past the limit is enough for the decoder to refuse it.
		p, err := io.ReadAll(io.LimitReader(r, int64(in.maxPayload)+1))
		if err != nil {
			return nil, false, noop, fmt.Errorf("--file: %w", err)
		}
		return kvevents.SinglePayload(p), false, noop, nil
	}
	r, closeFn, err := openInput(in.frames, stdin)
	if err != nil {
		return nil, false, noop, fmt.Errorf("--frames: %w", err)
	}
	return kvevents.NewFrameReader(r), true, closeFn, nil
}

func openInput(path string, stdin io.Reader) (io.Reader, func(), error) {
	if path == "-" {
		return stdin, func() {}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	return f, func() { f.Close() }, nil
}
