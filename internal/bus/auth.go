// This file holds NATS authentication and TLS: what a client presents, what an embedded server requires.

package bus

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// ErrAuth marks NATS authentication or TLS options that cannot work; the
// message names the flag to fix.
var ErrAuth = errors.New("bad nats auth options")

// Environment variables that carry NATS secrets, so that they need not be
// on the command line, which every local user can list.
const (
	TokenEnv    = "KVROUTER_NATS_TOKEN"
	PasswordEnv = "KVROUTER_NATS_PASSWORD"
)

// Auth is how a NATS client proves who it is and checks the server it
// reaches; for an embedded server, what it requires of its clients.
type Auth struct {
	// At most one credential. CredsFile is a .creds file (a user JWT and
	// its nkey seed, --nats-creds) and NKeySeedFile a file holding a user
	// nkey seed (--nats-nkey): both for an external server. User and
	// Password (--nats-user, the password from --nats-password-file or
	// PasswordEnv) and Token (--nats-token-file or TokenEnv) work with the
	// embedded server too.
	CredsFile    string
	NKeySeedFile string
	User         string
	Password     string
	Token        string
	// TokenFile is where Token came from. An embedded server that listens
	// beyond loopback without a credential writes the token it generates
	// there (DefaultTokenFile when empty).
	TokenFile string
	// TLSCA verifies the server (for an embedded server: its clients,
	// which must then present certificates); TLSCert and TLSKey are this
	// side's certificate (--nats-tls-ca, --nats-tls-cert, --nats-tls-key).
	TLSCA, TLSCert, TLSKey string
}

// DefaultTokenFile is where an embedded server listening beyond loopback
// writes the token it generated when --nats-token-file is not given:
// kvrouter/nats-token in the user's configuration directory
// ($XDG_CONFIG_HOME, else ~/.config, on Linux).
func DefaultTokenFile() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("%w: no configuration directory for the generated NATS token (%v); give --nats-token-file", ErrAuth, err)
	}
	return filepath.Join(dir, "kvrouter", "nats-token"), nil
}

// ReadSecret reads a secret from file, else from the environment variable
// env (lookup is os.LookupEnv at the edge); "" when neither is set.
// Surrounding whitespace is not part of it. A file that is set but
// unreadable or empty is an error: a typo must not turn authentication off.
func ReadSecret(file, env, flag string, lookup func(string) (string, bool)) (string, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("%w: %s: %w", ErrAuth, flag, err)
		}
		if b = bytes.TrimSpace(b); len(b) == 0 {
			return "", fmt.Errorf("%w: %s %s is empty", ErrAuth, flag, file)
		}
		return string(b), nil
	}
	if v, ok := lookup(env); ok {
		if v = strings.TrimSpace(v); v == "" {
			return "", fmt.Errorf("%w: %s is set but empty; unset it or give a secret", ErrAuth, env)
		}
		return v, nil
	}
	return "", nil
}

// ReadSecrets fills Password and Token from their files, else from
// PasswordEnv and TokenEnv. For a process that starts an embedded server, a
// TokenFile that does not exist yet is where the server writes the token it
// generates; for a client it is an error.
func (a *Auth) ReadSecrets(passwordFile string, embedded bool, lookup func(string) (string, bool)) error {
	var err error
	if a.Password, err = ReadSecret(passwordFile, PasswordEnv, "--nats-password-file", lookup); err != nil {
		return err
	}
	if embedded && a.TokenFile != "" {
		if _, err := os.Stat(a.TokenFile); errors.Is(err, os.ErrNotExist) {
			return nil
		}
	}
	a.Token, err = ReadSecret(a.TokenFile, TokenEnv, "--nats-token-file", lookup)
	return err
}

// check refuses contradictory options.
func (a *Auth) check() error {
	var given []string
	for flag, set := range map[string]bool{"--nats-creds": a.CredsFile != "", "--nats-nkey": a.NKeySeedFile != "",
		"--nats-user": a.User != "", "--nats-token-file/" + TokenEnv: a.Token != ""} {
		if set {
			given = append(given, flag)
		}
	}
	if len(given) > 1 {
		return fmt.Errorf("%w: give one NATS credential, not %s", ErrAuth, strings.Join(given, " and "))
	}
	if a.Password != "" && a.User == "" {
		return fmt.Errorf("%w: a NATS password (--nats-password-file or %s) needs --nats-user", ErrAuth, PasswordEnv)
	}
	if (a.TLSCert == "") != (a.TLSKey == "") {
		return fmt.Errorf("%w: --nats-tls-cert and --nats-tls-key go together", ErrAuth)
	}
	return nil
}

// hasCredential reports whether a client presents anything.
func (a *Auth) hasCredential() bool {
	return a.CredsFile != "" || a.NKeySeedFile != "" || a.User != "" || a.Token != ""
}

// credentialOptions are the client options that present the credential.
func (a *Auth) credentialOptions() ([]nats.Option, error) {
	switch {
	case a.CredsFile != "":
		if _, err := os.Stat(a.CredsFile); err != nil {
			return nil, fmt.Errorf("%w: --nats-creds: %w", ErrAuth, err)
		}
		return []nats.Option{nats.UserCredentials(a.CredsFile)}, nil
	case a.NKeySeedFile != "":
		o, err := nats.NkeyOptionFromSeed(a.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("%w: --nats-nkey %s: %w", ErrAuth, a.NKeySeedFile, err)
		}
		return []nats.Option{o}, nil
	case a.User != "":
		return []nats.Option{nats.UserInfo(a.User, a.Password)}, nil
	case a.Token != "":
		return []nats.Option{nats.Token(a.Token)}, nil
	}
	return nil, nil
}

// tlsOptions are the client options for TLS to the server.
func (a *Auth) tlsOptions() []nats.Option {
	var out []nats.Option
	if a.TLSCA != "" {
		out = append(out, nats.RootCAs(a.TLSCA))
	}
	if a.TLSCert != "" {
		out = append(out, nats.ClientCert(a.TLSCert, a.TLSKey))
	}
	return out
}

// serve sets what an embedded server on host requires of its clients. One
// listening beyond loopback without a credential gets a token generated
// now and written to TokenFile, for agents to read: anyone who reaches the
// port could otherwise register workers and publish their events.
func (a *Auth) serve(o *server.Options, host string) error {
	if a.CredsFile != "" || a.NKeySeedFile != "" {
		return fmt.Errorf("%w: --nats-creds and --nats-nkey are for an external NATS (--nats); the embedded server takes --nats-token-file or --nats-user", ErrAuth)
	}
	if !a.hasCredential() && !loopbackHost(host) {
		if err := a.generateToken(); err != nil {
			return err
		}
	}
	switch {
	case a.User != "":
		o.Username, o.Password = a.User, a.Password
	case a.Token != "":
		o.Authorization = a.Token
	}
	if a.TLSCert != "" {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: a.TLSCert, KeyFile: a.TLSKey, CaFile: a.TLSCA, Verify: a.TLSCA != ""})
		if err != nil {
			return fmt.Errorf("%w: --nats-tls-cert, --nats-tls-key, --nats-tls-ca: %w", ErrAuth, err)
		}
		o.TLS, o.TLSConfig, o.TLSVerify, o.TLSTimeout = true, tc, a.TLSCA != "", 2
	} else if a.TLSCA != "" {
		return fmt.Errorf("%w: --nats-tls-ca for the embedded server needs its --nats-tls-cert and --nats-tls-key", ErrAuth)
	}
	return nil
}

// generateToken makes a random token and writes it to TokenFile, readable
// by its owner only.
func (a *Auth) generateToken() error {
	path := a.TokenFile
	if path == "" {
		var err error
		if path, err = DefaultTokenFile(); err != nil {
			return err
		}
	}
	var b [32]byte
	rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("%w: --nats-token-file: %w", ErrAuth, err)
	}
	// Written aside and renamed: an agent reading the file meanwhile sees
	// the old token or the new one, never half of one.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(token+"\n"), 0o600); err != nil {
		return fmt.Errorf("%w: --nats-token-file: %w", ErrAuth, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("%w: --nats-token-file: %w", ErrAuth, err)
	}
	a.Token, a.TokenFile = token, path
	return nil
}

// loopbackHost reports whether a server bound to host is reachable from
// this machine only.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
