// This file holds `kvrouter decode`: engine KV event batches from hex, files or ZMQ to JSON lines.

package main

import (
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvstream"
)

func init() { commands = append(commands, newDecodeCmd) }

func newDecodeCmd() *cobra.Command {
	var hexPayload, file, frames, zmqEndpoint, topic, replay string
	var maxPayload, count int
	var bind bool
	cmd := &cobra.Command{
		Use:   "decode (--hex HEX | --file PATH | --frames PATH | --zmq ENDPOINT)",
		Short: "Decode engine KV event batches (vLLM/SGLang msgpack) to JSON lines",
		Long: `decode reads KV event batches as vLLM and SGLang publish them (msgpack, array
or map form, any build since 2025) and prints one JSON object per batch on stdout:

  {"ts":...,"dp_rank":0,"events":[{"type":"BlockStored","block_hashes":[...],...}]}

Block hashes print as unsigned 64-bit decimals; "tier" is device, host, disk or
external; "ownership" is null (the engine's own blocks) or "kvcr" (a KV cache
runner's). With --frames and --zmq each object also carries the message's "topic"
and "seq".

--zmq tails a live stream: it connects to an engine that binds (vLLM and SGLang
default to tcp://*:5557, so dial tcp://HOST:5557; DP rank r publishes on port
5557+r), or with --bind listens for engines that connect (llm-d convention).
Gaps, publisher restarts and reconnects are logged on stderr; with --replay a gap
is first healed from the engine's replay endpoint (with --bind, --replay means
that one engine connects). Each batch is written out as it arrives; SIGINT or
SIGTERM ends the command with exit status 0.

A malformed batch stops the command with exit status 1 and one line on stderr
naming the event and field at fault. Events the decoder drops (unknown medium or
ownership) or skips (unknown type) are left out of the output.`,
		Example: `  kvrouter decode --frames internal/kvevents/testdata/sim-map.frames
  kvrouter decode --hex 93cb41d954fc4020000090c0
  kvrouter decode --file payload.bin
  kvrouter decode --zmq tcp://10.0.0.7:5557 --count 10
  kvrouter decode --zmq tcp://*:5557 --bind --topic kv@
  kvrouter decode --zmq tcp://*:5557 --bind --replay tcp://10.0.0.7:5657 > events.jsonl`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d := &kvevents.Decoder{MaxPayload: maxPayload}
			if zmqEndpoint != "" {
				// The transport limit stays above --max-payload: an
				// oversize payload is the decoder's to report.
				limits := kvstream.Limits{MaxMessageSize: max(kvstream.DefaultMaxMessageSize, int64(maxPayload)+1<<16)}
				// With --bind, --replay names the one engine expected to
				// connect: its topics share one seq counter, as with an
				// engine that binds.
				cfg := kvstream.Config{Endpoint: zmqEndpoint, Bind: bind, OnePublisher: bind && replay != "", Topic: topic,
					ReplayEndpoint: replay, Limits: limits}
				// SIGINT and SIGTERM end the stream like --count does:
				// what was decoded is written out and the exit status is 0.
				ctx, stop := interruptible(cmd)
				defer stop()
				src, err := newZMQSource(ctx, cfg, count, slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil)))
				if err != nil {
					return err
				}
				defer src.Close()
				return kvevents.WriteJSONStream(cmd.OutOrStdout(), src, d, true)
			}
			in := decodeInput{hex: hexPayload, file: file, frames: frames, maxPayload: maxPayload,
				useHex: cmd.Flags().Changed("hex"), useFile: cmd.Flags().Changed("file")}
			src, withFrame, closeSrc, err := in.open(cmd.InOrStdin())
			if err != nil {
				return err
			}
			defer closeSrc()
			return kvevents.WriteJSON(cmd.OutOrStdout(), src, d, withFrame)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&hexPayload, "hex", "", "one batch payload as hex digits")
	fl.StringVar(&file, "file", "", `file holding one raw batch payload ("-" for stdin)`)
	fl.StringVar(&frames, "frames", "", `capture file, one "<topic> <seq 16 hex> <payload hex>" line per message ("-" for stdin)`)
	fl.IntVar(&maxPayload, "max-payload", kvevents.DefaultMaxPayload, "largest payload accepted, in bytes")
	fl.StringVar(&zmqEndpoint, "zmq", "", "tail a live ZMQ stream at this endpoint")
	fl.BoolVar(&bind, "bind", false, "with --zmq: bind the endpoint and let engines connect")
	fl.StringVar(&topic, "topic", "", "with --zmq: subscribe to topics with this prefix (default all)")
	fl.StringVar(&replay, "replay", "", "with --zmq: the engine's replay endpoint, to heal gaps")
	fl.IntVar(&count, "count", 0, "with --zmq: stop after this many batches (0: until interrupted)")
	cmd.MarkFlagsMutuallyExclusive("hex", "file", "frames", "zmq")
	cmd.MarkFlagsOneRequired("hex", "file", "frames", "zmq")
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
