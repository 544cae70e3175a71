// Package bus owns kvrouter's NATS connection: an embedded server for the
// single-machine default, or a client of an external cluster. Discovery and
// the event plane both ride on it. Clients present a credential (a .creds
// file, an nkey seed, user and password, or a token) and speak TLS when told;
// an embedded server listening beyond loopback requires a token, generated
// at start when none is given.
package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
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
	// Auth is the credential and TLS of the connection, and what an
	// embedded server requires of its clients.
	Auth Auth
}

// Bus is an open NATS connection, with the embedded server it started, if any.
type Bus struct {
	Conn *nats.Conn
	JS   jetstream.JetStream
	URL  string // the client URL others can dial
	// TokenFile holds the token clients of an embedded server present,
	// when it requires one ("" otherwise).
	TokenFile string

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
	auth := opts.Auth
	if err := auth.check(); err != nil {
		return nil, err
	}
	b := &Bus{URL: opts.URL}
	if opts.URL == "" {
		if err := b.startEmbedded(opts, &auth); err != nil {
			return nil, err
		}
		log.Debug("embedded nats started", "url", b.URL)
		if auth.Token != "" {
			b.TokenFile = auth.TokenFile
		}
		if opts.Auth.Token == "" && auth.Token != "" {
			log.Info("embedded NATS listens beyond loopback: clients must present the token generated in the file (agents: --nats-token-file)",
				"file", auth.TokenFile)
		}
	}
	cred, err := auth.credentialOptions()
	if err != nil {
		b.Close()
		return nil, err
	}
	url, secure := b.URL, auth.tlsOptions()
	if b.srv != nil && auth.TLSCert != "" {
		// Its own server's clients speak TLS and may have to present
		// certificates: this one is in the same process and needs neither.
		url, secure = strings.Replace(url, "tls://", "nats://", 1), []nats.Option{nats.InProcessServer(b.srv)}
	}
	conn, err := nats.Connect(url, append(append(cred, secure...),
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
	)...)
	if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
		b.Close()
		return nil, fmt.Errorf("%w: %s refused the credential (check --nats-creds, --nats-nkey, --nats-user or --nats-token-file): %v", ErrAuth, b.URL, err)
	}
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("%w at %s (check the NATS URL, its TLS (--nats-tls-ca, --nats-tls-cert, --nats-tls-key) and that the server runs with JetStream enabled): %v",
			ErrUnreachable, b.URL, err)
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

func (b *Bus) startEmbedded(opts Options, auth *Auth) error {
	host := opts.Host
	if host == "" {
		host = "127.0.0.1"
	}
	port := opts.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	so := &server.Options{
		ServerName:         "kvrouter-embedded",
		Host:               host,
		Port:               port,
		JetStream:          true,
		StoreDir:           opts.StoreDir,
		JetStreamMaxMemory: 256 << 20,
		NoSigs:             true,
		NoLog:              true,
		MaxPayload:         8 << 20,
	}
	if err := auth.serve(so, host); err != nil {
		return err
	}
	if so.StoreDir == "" {
		d, err := os.MkdirTemp("", "kvrouter-nats-")
		if err != nil {
			return fmt.Errorf("embedded nats store: %w", err)
		}
		so.StoreDir, b.tempDir = d, d
	}
	srv, err := server.NewServer(so)
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
