// Package bus owns kvrouter's NATS connection: an embedded server for the
// single-machine default, or a client of an external cluster. Discovery and
// the event plane both ride on it.
package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrUnreachable means no NATS server answered at the configured URL.
var ErrUnreachable = errors.New("nats unreachable")

// Options configures Open.
type Options struct {
	// URL of an external NATS cluster (with JetStream enabled). Empty starts
	// an embedded server.
	URL string
	// Embedded server settings, used when URL is empty.
	Host     string // default 127.0.0.1
	Port     int    // 0 picks a free port
	StoreDir string // JetStream storage; default a fresh temporary directory
	// Name identifies this client in the server's monitoring.
	Name           string
	ConnectTimeout time.Duration // default 5s
	Logger         *slog.Logger
}

// Bus is an open NATS connection, with the embedded server it started, if any.
type Bus struct {
	Conn *nats.Conn
	JS   jetstream.JetStream
	URL  string // the client URL others can dial

	srv     *server.Server
	tempDir string
}

// Open connects to opts.URL, or starts an embedded JetStream-enabled server.
func Open(ctx context.Context, opts Options) (*Bus, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = 5 * time.Second
	}
	b := &Bus{URL: opts.URL}
	if opts.URL == "" {
		if err := b.startEmbedded(opts); err != nil {
			return nil, err
		}
		log.Debug("embedded nats started", "url", b.URL)
	}
	conn, err := nats.Connect(b.URL,
		nats.Name(opts.Name),
		nats.Timeout(opts.ConnectTimeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.RetryOnFailedConnect(false),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("nats reconnected", "url", c.ConnectedUrl()) }),
	)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("%w at %s (check the NATS URL and that the server runs with JetStream enabled): %v", ErrUnreachable, b.URL, err)
	}
	b.Conn = conn
	js, err := jetstream.New(conn)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("nats jetstream: %w", err)
	}
	b.JS = js
	return b, nil
}

func (b *Bus) startEmbedded(opts Options) error {
	host := opts.Host
	if host == "" {
		host = "127.0.0.1"
	}
	port := opts.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	dir := opts.StoreDir
	if dir == "" {
		d, err := os.MkdirTemp("", "kvrouter-nats-")
		if err != nil {
			return fmt.Errorf("embedded nats store: %w", err)
		}
		dir, b.tempDir = d, d
	}
	srv, err := server.NewServer(&server.Options{
		ServerName:         "kvrouter-embedded",
		Host:               host,
		Port:               port,
		JetStream:          true,
		StoreDir:           dir,
		JetStreamMaxMemory: 256 << 20,
		NoSigs:             true,
		NoLog:              true,
		MaxPayload:         8 << 20,
	})
	if err != nil {
		return fmt.Errorf("embedded nats: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return fmt.Errorf("embedded nats on %s:%d did not start (is the port taken? set another)", host, opts.Port)
	}
	b.srv = srv
	b.URL = srv.ClientURL()
	return nil
}

// Embedded reports whether this Bus runs its own server.
func (b *Bus) Embedded() bool { return b.srv != nil }

// Close drains the connection and stops the embedded server.
func (b *Bus) Close() {
	if b.Conn != nil {
		b.Conn.Close()
	}
	if b.srv != nil {
		b.srv.Shutdown()
		b.srv.WaitForShutdown()
	}
	if b.tempDir != "" {
		os.RemoveAll(b.tempDir)
	}
}
