// This file holds decode's --zmq input: a live engine stream tailed as a kvevents.Source.

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"kvrouter/internal/kvevents"
	"kvrouter/internal/kvstream"
)

// zmqSource tails a live engine stream as a kvevents.Source. Stream
// signals (gaps, restarts, reconnects) go to the log, on stderr, so the
// JSON lines on stdout stay one batch each.
type zmqSource struct {
	items  chan kvstream.Item
	done   chan error
	cancel context.CancelFunc
	left   int // frames still to yield; <0 means no limit
	log    *slog.Logger
	ended  bool // done was received
}

var _ kvevents.Source = (*zmqSource)(nil)

func newZMQSource(ctx context.Context, cfg kvstream.Config, count int, log *slog.Logger) (*zmqSource, error) {
	cfg.Logger = log
	sub, err := kvstream.NewSubscriber(cfg)
	if err != nil {
		return nil, fmt.Errorf("--zmq: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &zmqSource{items: make(chan kvstream.Item, 256), done: make(chan error, 1), cancel: cancel, left: count, log: log}
	if count <= 0 {
		s.left = -1
	}
	go func() { s.done <- sub.Run(ctx, s.items) }()
	return s, nil
}

func (s *zmqSource) Next() (kvevents.Frame, error) {
	if s.left == 0 {
		return kvevents.Frame{}, io.EOF
	}
	for {
		select {
		case err := <-s.done:
			s.ended = true
			if err != nil {
				return kvevents.Frame{}, fmt.Errorf("--zmq: %w", err)
			}
			return kvevents.Frame{}, io.EOF
		case it := <-s.items:
			switch it := it.(type) {
			case kvstream.Message:
				if s.left > 0 {
					s.left--
				}
				return kvevents.Frame{Topic: it.Topic, Seq: it.Seq, Payload: it.Payload}, nil
			default:
				s.log.Warn("stream", "signal", fmt.Sprintf("%T", it), "detail", fmt.Sprintf("%+v", it))
			}
		}
	}
}

func (s *zmqSource) Close() {
	s.cancel()
	if !s.ended {
		<-s.done
	}
}
